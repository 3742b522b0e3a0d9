"""Jobs for the results tests (tests/e2e/worker/test_results.py, tests/unit/api/test_results.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Callable
from typing import Any

import redis

from cogworker import job


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0"))


@job(result_ttl=60)
def add(a: int, b: int) -> dict[str, Any]:
    return {"sum": a + b, "parts": [a, b]}


@job(result_ttl=60, retry=False)
def boom(message: str) -> None:
    raise ValueError(message)


@job(result_ttl=60, retry=1)
def flaky(key: str) -> str:
    """Fails its first run (to be retried), succeeds its second."""
    tries = int(_redis().incr(f"test:flaky:{key}"))
    if tries == 1:
        raise RuntimeError("first try fails")
    return f"ok after {tries} tries"


@job(result_ttl=60, retry=1)
def not_json(key: str) -> dict[str, Any]:
    _redis().incr(f"test:not_json:{key}")
    return {"when": [1, dt.datetime(2020, 1, 1, tzinfo=dt.UTC)]}


@job(result_ttl=60)
def slow(seconds: float, value: Any) -> Any:
    _redis().rpush("test:slow_started", str(value))
    time.sleep(seconds)
    return value


@job(result_ttl=60)
def per_run(key: str) -> str:
    """Its first run stalls (a test kills its process); each run returns which run it was."""
    run = int(_redis().incr(f"test:per_run:{key}"))
    _redis().rpush("test:per_run_started", f"{run} {os.getpid()}")
    if run == 1:
        time.sleep(120)
    return f"run {run}"


@job(result_ttl=60)
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@job(result_ttl=60, retry=False)
async def async_boom(message: str) -> None:
    await asyncio.sleep(0)
    raise KeyError(message)


@job
def plain(value: Any) -> Any:
    """Keeps no result unless COGWORKER_RESULT_TTL_S (or .set(result_ttl=...)) says so."""
    _redis().rpush("test:plain", "ran")
    return value


@job
def returns_object() -> object:
    """Keeps no result: its return value is ignored, as for any job."""
    _redis().rpush("test:plain", "object")
    return object()


# Set by a test: called inside `hooked`, e.g. to stop Redis while the job runs.
hook: Callable[[], object] | None = None


@job(result_ttl=60)
def hooked(value: Any) -> Any:
    if hook is not None:
        hook()
    return value
