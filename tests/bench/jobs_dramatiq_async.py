"""dramatiq's W4 job, as `dramatiq jobs_dramatiq_async` imports it: an async actor on a RedisBroker with
the default middleware plus dramatiq's AsyncIO middleware (which runs a process's async actors on one
event loop thread). A module apart from jobs_dramatiq.py so the other workloads keep the stock broker.

Under AsyncIO, each worker thread hands its message's coroutine to the loop and waits for it, so the
number of async actors running at once per process is the worker command's --threads (500 in W4).
"""

from __future__ import annotations

import os

import dramatiq
import jobkit
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware.asyncio import AsyncIO

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
async def w4(index: int) -> None:
    await jobkit.w4_job(index)
