"""The start-up curve's one-job app for Dramatiq (curves/startup.py): jobs_dramatiq.py's broker and its
no-op actor alone. With BENCH_STACK=1 it imports a typical app's modules first (startup_stack.py), as
the other systems' apps do."""

from __future__ import annotations

import os

if os.environ.get("BENCH_STACK") == "1":
    import startup_stack  # noqa: F401

import dramatiq
import jobkit
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
def noop() -> None:
    jobkit.mark_done()
