"""Jobs for the many-hosts tests (tests/e2e/hosts/): every run is recorded in a file outside Redis, so
a test can count runs even when Redis lost everything.

Each line is one O_APPEND write (atomic for lines this short): `S <tag> <host> <pid>` when a run
starts, `E ...` when it ends, `F ...` when it fails. The host is HOSTS_TEST_HOST, set per simulated
host. While a file `<sink>.stall-<host>` exists, a run on that host that reaches its end waits there,
and fails once the file is gone: a failure that must not be filed when the host comes back from a
partition, since its job was requeued meanwhile.
"""

from __future__ import annotations

import os
import time

from line_sink import append_line

from cogworker import job


@job(retry=3)
def ran(sink: str, tag: str, seconds: float) -> None:
    host = os.environ.get("HOSTS_TEST_HOST", "?")
    append_line(sink, f"S {tag} {host} {os.getpid()}")
    time.sleep(seconds)
    stall = f"{sink}.stall-{host}"
    if os.path.exists(stall):
        deadline = time.monotonic() + 120
        while os.path.exists(stall) and time.monotonic() < deadline:
            time.sleep(0.05)
        append_line(sink, f"F {tag} {host} {os.getpid()}")
        raise RuntimeError(f"{tag} fails on {host}")
    append_line(sink, f"E {tag} {host} {os.getpid()}")
