"""dramatiq's benchmark jobs and broker, as `dramatiq jobs_dramatiq` imports them.

The broker is dramatiq's stock RedisBroker with its default middleware: the comparison is with
dramatiq as people install it.
"""

from __future__ import annotations

import os

import dramatiq
import jobkit
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop() -> None:
    jobkit.mark_done()


# The payload curve (curves/payload.py): W1's job with one string argument of a given size.
@dramatiq.actor(queue_name="default")
def payload(data: str) -> None:
    jobkit.mark_done()


@dramatiq.actor(queue_name="default")
def pickup(pushed_at: float) -> None:
    jobkit.record_pickup(pushed_at)


@dramatiq.actor(queue_name="default")
def io_wait() -> None:
    jobkit.io_wait()


@dramatiq.actor(queue_name="default")
def paced(pushed_at: float) -> None:
    jobkit.record_paced(pushed_at)


@dramatiq.actor(queue_name="default")
def sleeper(index: int, seconds: float) -> None:
    jobkit.sleep_job(index, seconds)
