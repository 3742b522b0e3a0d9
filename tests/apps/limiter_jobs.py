"""Jobs for the rate limiter tests (tests/e2e/worker/test_limiters.py, tests/e2e/swarm/
test_swarm_limiters.py). Each records in Redis what it saw while it held its limiter."""

from __future__ import annotations

import os
import time

import redis

import cogworker
from cogworker import job

THREE = cogworker.limiter.concurrent("three", 3, lease_s=30)
# Holds for ever once started: its slot comes back only when its lease (6 s) ends.
KILLABLE = cogworker.limiter.concurrent("killable", 1, lease_s=6)
FIVE_PER_2S = cogworker.limiter.window("five-per-2s", 5, per=2)
# One pass an hour, and a job put back past 1 s fails: the second job can only fail.
STINGY = cogworker.limiter.window("stingy", 1, per=3600, max_wait_s=1)


def _redis() -> redis.Redis:
    url = os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0")
    return redis.Redis.from_url(url, decode_responses=True)


@job(limit=THREE, retry=0)
def three_at_once(tag: str, seconds: float) -> None:
    """Counts the holders of THREE while it holds one, and records the count it saw."""
    client = _redis()
    now = client.incr("test:holding")
    client.rpush("test:seen", now)
    time.sleep(seconds)
    client.decr("test:holding")
    client.rpush("test:ran", tag)


@job(retry=0)
def hold_for_ever(tag: str) -> None:
    with KILLABLE:
        _redis().rpush("test:started", f"{tag} {os.getpid()}")
        time.sleep(600)


@job(retry=0, status=True)
def windowed(tag: str) -> None:
    """Passes FIVE_PER_2S in its body (`with`), not through the option. Records the clock just
    before and just after the pass: the pass itself happened in between."""
    before = time.time()
    with FIVE_PER_2S:
        _redis().rpush("test:ran", f"{tag} {before} {time.time()}")


@job(retry=False, limit=STINGY)
def stingy(tag: str) -> None:
    _redis().rpush("test:ran", tag)


@job(retry=0, limit=lambda account, tag: cogworker.limiter.concurrent(f"account-{account}", 1, lease_s=30))
def per_account(account: int, tag: str) -> None:
    """A dynamic name: one at a time per account."""
    client = _redis()
    key = f"test:holding:{account}"
    client.rpush(f"test:seen:{account}", client.incr(key))
    time.sleep(0.05)
    client.decr(key)
    client.rpush("test:ran", tag)
