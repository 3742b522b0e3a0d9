"""Jobs for the one-slot test (tests/e2e/prefix/test_one_slot.py): between them they make cogworker
write every kind of key it has (queues, schedule, retry, dead, death notices, unique claims, statuses,
results, periodic claims and running locks, orphan counters)."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from cogworker import job, on_death, periodic


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


@job
def record(tag: str) -> None:
    _redis().rpush("test:ran", f"{tag} {os.getpid()}")


@job(retry=1)
def fails(tag: str) -> None:
    raise ValueError(f"{tag} fails, to be retried")


@job(retry=False)
def dies(tag: str) -> None:
    raise ValueError(f"{tag} fails for good")


@job(retry=0)
def dies_at_once(tag: str) -> None:
    """Dead at its first failure in every mode (in the Sidekiq mode `retry=False` discards instead)."""
    raise ValueError(f"{tag} fails for good")


@job(unique="until_executed")
def unique_one(tag: str) -> None:
    record(tag)


@job(status=True)
def tracked(tag: str) -> None:
    record(tag)


@job(result_ttl=60)
def add(a: int, b: int) -> int:
    return a + b


@job
def sleeper(tag: str) -> None:
    """Runs long enough to be killed in the middle (its process's jobs are then recovered)."""
    _redis().rpush("test:started", f"{tag} {os.getpid()}")
    time.sleep(30)


@periodic("* * * * * *", until_executed=True)
@job
def tick() -> None:
    _redis().rpush("test:ticks", str(os.getpid()))


@on_death
def noted(job: dict[str, Any], death: Any) -> None:
    _redis().rpush("test:deaths", str(job.get("jid")))
