"""dramatiq with its Redis broker: `dramatiq --processes 2 --threads 8`."""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from systems.base import THREADS_PER_PROCESS, WORKER_PROCESSES, System


class Dramatiq(System):
    name = "dramatiq"
    bulk_label = "group().run() (no bulk path: one script call per message)"
    notes = ("dramatiq: stock RedisBroker and default middleware; INFO logging (nothing per job).",)

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        import dramatiq

        self._dramatiq = dramatiq
        self._jobs: ModuleType = importlib.import_module("jobs_dramatiq")

    def worker_argv(self) -> list[str]:
        return [
            "dramatiq", "jobs_dramatiq",
            "--processes", str(WORKER_PROCESSES),
            "--threads", str(THREADS_PER_PROCESS),
            "--queues", "default",
        ]  # fmt: skip

    def version(self) -> str:
        return metadata.version("dramatiq")

    def push_noop(self) -> None:
        self._jobs.noop.send()

    def push_noop_bulk(self, count: int) -> None:
        self._dramatiq.group(self._jobs.noop.message() for _ in range(count)).run()

    def push_pickup(self, pushed_at: float) -> None:
        self._jobs.pickup.send(pushed_at)

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._jobs.sleeper.send(index, seconds)

    def close(self) -> None:
        self._jobs.broker.close()
