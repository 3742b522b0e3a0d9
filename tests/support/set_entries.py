"""Entries of the retry/scheduled/dead sets, written straight into Redis for ops and CLI tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis

from cogworker import codec
from cogworker.ops import NotFound


def job(jid: str, **fields: Any) -> dict[str, Any]:
    """A plain demo_jobs.record payload for `jid` (its argument), as it waits in a queue or a set."""
    return {
        "class": "demo_jobs.record",
        "args": [jid],
        "kwargs": {},
        "jid": jid,
        "queue": "default",
        **fields,
    }


def dead_job(jid: str, **fields: Any) -> dict[str, Any]:
    job = {
        "class": "demo_jobs.boom",
        "args": ["x"],
        "kwargs": {},
        "jid": jid,
        "queue": "default",
        "created_at": 1.0,
        "enqueued_at": 2.0,
        "retry": 2,
        "retry_count": 2,
        "error_class": "ValueError",
        "error_message": "x",
        "failed_at": 3.0,
        "died_at": 4.0,
    }
    job.update(fields)
    return job


def add(r: redis.Redis, key: str, job: dict[str, Any] | str, score: float = 100.0) -> str:
    raw = job if isinstance(job, str) else codec.dumps(job)
    r.zadd(key, {raw: score})
    return raw


def two_operators(r: redis.Redis, action: Callable[[redis.Redis], str]) -> list[str]:
    """Two operators acting on one entry at once: `action` in two threads released together, each on a
    client of its own; what each said, sorted ("not found" where the other had taken the entry)."""
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def operator() -> None:
        client = redis.Redis(connection_pool=r.connection_pool)
        barrier.wait()
        try:
            outcomes.append(action(client))
        except NotFound:
            outcomes.append("not found")

    threads = [threading.Thread(target=operator) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return sorted(outcomes)
