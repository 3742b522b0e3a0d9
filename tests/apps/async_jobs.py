"""`async def` jobs for the tests. Each records what happened in Redis, through an async client (or
a plain one where the job is about blocking the loop)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import time
from typing import Any

import demo_jobs  # its jobs are part of this app
import redis.asyncio
import structlog

from cogworker import current_batch, job, limiter, server_chain

# Set by the server middleware below around every job; the jobs read it to show middleware context
# reaches the coroutine.
tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="unset")


def _aredis() -> redis.asyncio.Redis:
    url = os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0")
    return redis.asyncio.Redis.from_url(url, decode_responses=True)


async def _rpush(key: str, value: str) -> None:
    client = _aredis()
    try:
        await client.rpush(key, value)
    finally:
        await client.aclose()


def with_tenant(job: dict[str, Any], call_next: Any) -> None:
    """A plain (sync) server middleware, as users already write them."""
    token = tenant.set(f"tenant-of-{job['jid']}")
    try:
        call_next()
    finally:
        tenant.reset(token)


server_chain.add(with_tenant)


@job
async def marker(tag: str) -> None:
    """Awaits, then writes `tag pid`: only a body that really ran leaves the marker."""
    await asyncio.sleep(0.01)
    await _rpush("test:async", f"{tag} {os.getpid()}")


@job(retry=1)
async def async_boom(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


@job
async def nap(tag: str, seconds: float) -> None:
    """Marks its start, sleeps on the loop, marks its end."""
    await _rpush("test:started", tag)
    await asyncio.sleep(seconds)
    await _rpush("test:ran", tag)


@job
async def context_probe(tag: str) -> None:
    """Records the structlog context and the middleware's contextvar as seen inside the coroutine,
    after an await (the task's own context, not the thread's)."""
    await asyncio.sleep(0.01)
    bound = structlog.contextvars.get_contextvars()
    structlog.get_logger("test.async").info("inside_coroutine", tag=tag)
    await _rpush(
        "test:ctx", f"{tag}|{bound.get('jid')}|{bound.get('job')}|{bound.get('queue')}|{tenant.get()}"
    )


@job
async def hog(seconds: float) -> None:
    """Blocks the loop: a sync sleep inside `async def`."""
    time.sleep(seconds)
    await _rpush("test:ran", "hog")


@job(retry=1)
def returns_coroutine(tag: str) -> Any:
    """A sync job that returns a coroutine instead of running it: an error, not a success."""
    return _rpush("test:never", tag)


@job(unique="until_executed", status=True)
async def unique_marker(tag: str) -> None:
    await _rpush("test:async", tag)


@job
async def slow_first(tag: str) -> None:
    """Its first run sleeps far past any stop timeout (and records a cancellation); later runs are
    quick."""
    client = _aredis()
    try:
        runs = await client.incr("test:slow_first:runs")
        await client.rpush("test:started", f"{tag} {os.getpid()}")
        if runs == 1:
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                await client.rpush("test:cancelled", tag)
                raise
        await client.rpush("test:ran", f"{tag} {os.getpid()}")
    finally:
        await client.aclose()


@job
async def span(tag: str, seconds: float) -> None:
    """Records `+tag` when it starts and `-tag` when it ends, in one list: how many overlapped."""
    await _rpush("test:spans", f"+{tag}")
    await asyncio.sleep(seconds)
    await _rpush("test:spans", f"-{tag}")


# One at a time: a job holding it runs on a bridge thread (worker/running/async_process.py), its
# body on the loop.
ONE_AT_A_TIME = limiter.concurrent("async-test", 1, lease_s=30)


@job(limit=ONE_AT_A_TIME)
async def limited_span(tag: str) -> None:
    await _rpush("test:spans", f"+{tag}")
    await asyncio.sleep(0.05)
    await _rpush("test:spans", f"-{tag}")


@job
async def member(tag: str) -> None:
    """A batch member: its batch is the coroutine's current_batch()."""
    batch = current_batch()
    await _rpush("test:members", f"{tag} {batch.bid if batch is not None else None}")


__all__ = ["demo_jobs"]
