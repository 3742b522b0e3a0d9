"""Jobs with time limits, for the time-limit tests. Each records in Redis what it got to do."""

from __future__ import annotations

import asyncio
import os
import time

import redis

from cogworker import job


def _redis() -> redis.Redis:
    url = os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0")
    return redis.Redis.from_url(url, decode_responses=True)


def _spin(seconds: float) -> None:
    """Pure Python: JobTimeout can be raised at any of its bytecodes."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@job(timeout_s=0.5, retry=1)
def spin(tag: str, seconds: float) -> None:
    client = _redis()
    client.rpush("test:started", tag)
    _spin(seconds)
    client.rpush("test:ran", tag)


@job(timeout_s=0.5, retry=0)
def spin_to_dead(tag: str, seconds: float) -> None:
    _spin(seconds)
    _redis().rpush("test:ran", tag)


@job(retry=0)
def spin_default(tag: str, seconds: float) -> None:
    """No limit of its own: COGWORKER_JOB_TIMEOUT_S applies."""
    _spin(seconds)
    _redis().rpush("test:ran", tag)


@job(timeout_s=0.5, retry=1)
async def async_sleep(tag: str, seconds: float) -> None:
    client = _redis()
    client.rpush("test:started", tag)
    await asyncio.sleep(seconds)
    client.rpush("test:ran", tag)


@job(retry=0)
def short(seconds: float) -> None:
    """For the race: about as long as the limit pushed with it."""
    _spin(seconds)


@job(timeout_s=0.3, retry=0)
def blocked(tag: str) -> None:
    """Stuck where no exception reaches it: a read on a pipe nobody writes to (a C call)."""
    _redis().incr(f"test:runs:{tag}")
    read_end, _write_end = os.pipe()
    os.read(read_end, 1)
    _redis().rpush("test:ran", tag)


@job(timeout_s=0.3, retry=0)
async def async_stubborn(tag: str) -> None:
    """Ignores its cancellation: stuck on the loop past its limit."""
    _redis().incr(f"test:runs:{tag}")
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            _redis().rpush("test:cancelled", tag)


@job(timeout_s=0.5, retry=1)
def sleeper(tag: str, seconds: float) -> None:
    """Past its limit inside a C call (`time.sleep`): JobTimeout can't be raised until it returns."""
    client = _redis()
    client.rpush("test:started", tag)
    time.sleep(seconds)
    client.rpush("test:slept", tag)


@job(timeout_s=0.5, retry=0)
def sleeper_to_dead(tag: str, seconds: float) -> None:
    time.sleep(seconds)
    _redis().rpush("test:slept", tag)
