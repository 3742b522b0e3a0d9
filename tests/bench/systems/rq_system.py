"""rq: `rq worker-pool -n 2`. Each rq worker forks a work horse per job, so it drains far slower."""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

import redis

from systems.base import WORKER_PROCESSES, System


class Rq(System):
    name = "rq"
    bulk_label = "Queue.enqueue_many (one pipeline)"
    # A fork per job: about 50 jobs/s on 2 cores, so 20,000 jobs would take minutes; 1,000 give a stable rate.
    w1_share = 0.05
    notes = (
        "rq: one job at a time per worker (a forked work horse per job); -l WARNING, since rq logs "
        "two lines per job at its default INFO level.",
    )

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        from rq import Queue

        self._queue_class = Queue
        self._conn = redis.Redis.from_url(redis_url)
        self._queue = Queue("default", connection=self._conn)
        self._jobs: ModuleType = importlib.import_module("jobs_rq")

    def worker_argv(self) -> list[str]:
        return [
            "rq", "worker-pool",
            "--num-workers", str(WORKER_PROCESSES),
            "--url", self.redis_url,
            "--logging-level", "WARNING",
            "default",
        ]  # fmt: skip

    def version(self) -> str:
        return metadata.version("rq")

    def push_noop(self) -> None:
        self._queue.enqueue(self._jobs.noop)

    def push_noop_bulk(self, count: int) -> None:
        prepare = self._queue_class.prepare_data
        self._queue.enqueue_many([prepare(self._jobs.noop) for _ in range(count)])

    def push_pickup(self, pushed_at: float) -> None:
        self._queue.enqueue(self._jobs.pickup, pushed_at)

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._queue.enqueue(self._jobs.sleeper, index, seconds)

    def close(self) -> None:
        self._conn.close()
