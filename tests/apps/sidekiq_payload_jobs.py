"""The Python side of tests/apps/sidekiq_payload_jobs.rb: jobs under the names of its Ruby classes, run
by a cogworker worker in the Sidekiq mode. What they saw goes to Redis lists the test reads."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import redis

import cogworker


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


@cogworker.on_death
def noted(job: dict[str, Any], death: cogworker.Death) -> None:
    _redis().rpush("payload-test:python-deaths", json.dumps({"jid": job["jid"], "cause": death.cause}))


@cogworker.job(name="PingPongJob", queue="pingpong", retry=2)
def ping_pong(n: int) -> None:
    raise ValueError(f"failed in cogworker: {n}")


@cogworker.job(name="LaterJob", queue="rb")
def later(n: int) -> None:
    raise AssertionError("a Ruby job: Sidekiq runs it, never cogworker")


@cogworker.job(name="DiscardJob", queue="py", retry=False)
def discard(n: int) -> None:
    raise ValueError(f"discarded in cogworker: {n}")


@cogworker.job(name="ProBatchJob", queue="py", retry=1)
def pro_batch(n: int) -> None:
    batch = cogworker.current_batch()
    _redis().rpush("payload-test:pro-runs", json.dumps([n, batch.bid if batch is not None else None]))
    if n < 0:
        raise ValueError(f"failed in cogworker: {n}")
