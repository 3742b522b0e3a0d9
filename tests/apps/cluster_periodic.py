"""A periodic entry for the Redis Cluster tests: fires every second and records each run in the file
CLUSTER_TICK_FILE names. Its own module, so only the test that wants ticks gets them."""

from __future__ import annotations

import os

from cogworker import job, periodic


@periodic("* * * * * *", tz="UTC")
@job
def tick() -> None:
    path = os.environ.get("CLUSTER_TICK_FILE")
    if path:
        with open(path, "a") as out:
            out.write(f"tick {os.getpid()}\n")
