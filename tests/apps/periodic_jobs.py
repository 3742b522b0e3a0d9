"""A periodic entry firing every second, for the multi-process test in tests/unit/api/test_periodic.py.

A server middleware records which slot each run belongs to (`test:slots`, "<slot> <pid>"), so the
test can check that no slot ran twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import redis

from cogworker import job, periodic, server_chain


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0"))


@periodic("* * * * * *", tz="UTC")
@job(queue="default")
def every_second() -> None:
    pass


def record_slot(job: dict[str, Any], call_next: Callable[[], None]) -> None:
    call_next()
    if job.get("periodic_name"):
        _redis().rpush("test:slots", f"{job['periodic_slot']} {os.getpid()}")


server_chain.add(record_slot)
