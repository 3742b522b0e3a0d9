"""A periodic entry for the TLS + ACL ops test (tests/e2e/tls/test_tls_ops.py): fires every second and
records each run in the file TLS_TICK_FILE names. Its own module, so only the test that wants ticks
gets them."""

from __future__ import annotations

import os

from cogworker import job, periodic


@periodic("* * * * * *", tz="UTC")
@job
def tick() -> None:
    path = os.environ.get("TLS_TICK_FILE")
    if path:
        with open(path, "a") as out:
            out.write(f"tick {os.getpid()}\n")
