"""Jobs for tests/e2e/worker/test_expiry.py: each records that it ran."""

from __future__ import annotations

import datetime as dt
import os

import redis

from cogworker import job


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0"))


@job(expires_in=2)
def fresh_only(tag: str) -> None:
    _redis().rpush("test:ran", tag)


@job(expires_in=dt.timedelta(seconds=5), unique="until_executed", status=True, retry=3)
def fresh_unique(tag: str) -> None:
    _redis().rpush("test:ran", tag)
    raise ValueError(f"fails so it retries: {tag}")


@job(expires_in=2)
async def fresh_async(tag: str) -> None:
    _redis().rpush("test:ran", tag)


@job
def plain(tag: str) -> None:
    _redis().rpush("test:ran", tag)
