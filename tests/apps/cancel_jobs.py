"""Jobs for the cancellation tests (tests/e2e/worker/test_cancel.py). Each records in Redis when it
starts (`test:started`), how often it ran (`test:runs:<tag>`), and how it ended (`test:ended`)."""

from __future__ import annotations

import asyncio
import os
import time

import redis

import cogworker
from cogworker import job


def _redis() -> redis.Redis:
    url = os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0")
    return redis.Redis.from_url(url, decode_responses=True)


def _start(tag: str) -> redis.Redis:
    client = _redis()
    client.incr(f"test:runs:{tag}")
    client.rpush("test:started", f"{tag} {os.getpid()}")
    return client


@job(retry=3)
def cooperative(tag: str) -> None:
    """Checks for a cancel between small steps, for up to 30 s."""
    client = _start(tag)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cogworker.current_job().raise_if_cancelled()
            time.sleep(0.02)
        client.rpush("test:ended", f"{tag} finished")
    except cogworker.JobCancelled:
        client.rpush("test:ended", f"{tag} saw JobCancelled")
        raise


@job(unique="until_executed", retry=3)
def unique_cooperative(tag: str) -> None:
    cooperative(tag)


@job(retry=3)
def stubborn(tag: str, seconds: float) -> None:
    """Never checks: runs on after a cancel until its time is up (or its process dies)."""
    client = _start(tag)
    time.sleep(seconds)
    client.rpush("test:ended", f"{tag} finished cancelled={cogworker.current_job().cancelled}")


@job(retry=3)
async def async_sleeper(tag: str) -> None:
    """Sleeps 30 s on the loop; a cancel interrupts the await."""
    client = _start(tag)
    try:
        await asyncio.sleep(30)
        client.rpush("test:ended", f"{tag} finished")
    except asyncio.CancelledError:
        client.rpush("test:ended", f"{tag} task cancelled")
        raise


@job
def record(tag: str) -> None:
    _start(tag)
    _redis().rpush("test:ended", f"{tag} finished")
