"""A periodic entry firing every second, for the lost-reply matrix's periodic.lua case
(tests/e2e/lost_reply/). A server middleware counts each slot's runs straight in Redis
(`matrix:slot:<slot>`, on `MATRIX_RECORD_URL`, past the fault proxy), so a slot run twice shows."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import redis

from cogworker import job, periodic, server_chain


@functools.cache
def _record() -> redis.Redis:
    return redis.Redis.from_url(os.environ["MATRIX_RECORD_URL"], decode_responses=True)


@periodic("* * * * * *", tz="UTC")
@job(queue="periodic", retry=False)
def tick() -> None:
    pass


def count_slot(job: dict[str, Any], call_next: Callable[[], None]) -> None:
    call_next()
    if job.get("periodic_name"):
        _record().incr(f"matrix:slot:{job['periodic_slot']}")


server_chain.add(count_slot)
