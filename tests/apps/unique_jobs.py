"""Unique jobs for tests/unit/api/test_unique.py. Each run is recorded in Redis (`test:ran`)."""

from __future__ import annotations

import os

import redis

from cogworker import job


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0"))


@job(unique="until_executed")
def rebuild(shop_id: int) -> None:
    _redis().rpush("test:ran", f"rebuild {shop_id}")


@job(unique="until_executed", unique_for=60)
def rebuild_for_a_minute(shop_id: int) -> None:
    _redis().rpush("test:ran", f"rebuild_for_a_minute {shop_id}")


@job(unique="until_executed", retry=2)
def flaky(tag: str) -> None:
    raise ValueError(f"flaky {tag}")


@job(unique="until_executed", retry=False)
def fails_for_good(tag: str) -> None:
    raise RuntimeError(f"no retries for {tag}")


@job(unique="until_executed")
def kill_me(tag: str) -> None:
    """Kills its own process every time: a poison pill."""
    _redis().rpush("test:started", f"{tag} {os.getpid()}")
    os.kill(os.getpid(), 9)
