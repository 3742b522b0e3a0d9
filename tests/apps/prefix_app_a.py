"""App A of the two sharing one Redis under different key prefixes (tests/e2e/prefix/): a periodic
entry of its own, so each app's `cogworker periodic list` must show only its own entry."""

from __future__ import annotations

import os

import redis

from cogworker import job, periodic


@periodic("* * * * * *", tz="UTC")
@job
def tick_a() -> None:
    redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"]).rpush("test:ticks", f"a {os.getpid()}")
