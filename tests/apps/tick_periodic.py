"""A periodic entry for the Redis Cluster and TLS + ACL tests (tests/e2e/cluster/test_cluster_swarm.py,
tests/e2e/tls/test_tls_ops.py): fires every second and records each run in the file TICK_FILE names.
Its own module, so only the test that wants ticks gets them."""

from __future__ import annotations

import os

from line_sink import append_line

from cogworker import job, periodic


@periodic("* * * * * *", tz="UTC")
@job
def tick() -> None:
    path = os.environ.get("TICK_FILE")
    if path:
        append_line(path, f"tick {os.getpid()}")
