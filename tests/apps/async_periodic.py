"""An `async def` job on a periodic entry firing every second (tests/e2e/worker/test_async_jobs.py).
A module of its own: every worker that imports it ticks the entry."""

from __future__ import annotations

import asyncio

from async_jobs import _rpush

from cogworker import job, periodic


@periodic("* * * * * *", tz="UTC")
@job(queue="default")
async def every_second_async() -> None:
    await asyncio.sleep(0)
    await _rpush("test:periodic_async", "ran")
