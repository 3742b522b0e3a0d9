"""celery with its Redis transport: `celery worker --pool prefork -c 2`."""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from systems.base import WORKER_PROCESSES, System


class Celery(System):
    name = "celery"
    bulk_label = "group().apply_async() (no bulk path: one LPUSH per message)"
    # A few hundred jobs/s with two pool processes: a quarter of W1's jobs keeps the run under 15 minutes.
    w1_share = 0.25
    notes = (
        "celery: prefork pool, one job at a time per pool process; stock settings (acks on receipt, "
        "prefetch 4, gossip/mingle on); -l WARNING, its default.",
    )

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        import celery

        self._celery = celery
        self._jobs: ModuleType = importlib.import_module("jobs_celery")

    def worker_argv(self) -> list[str]:
        return [
            "celery", "--app", "jobs_celery", "worker",
            "--pool", "prefork",
            "--concurrency", str(WORKER_PROCESSES),
            "--queues", "default",
            "--loglevel", "WARNING",
        ]  # fmt: skip

    def version(self) -> str:
        return metadata.version("celery")

    def push_noop(self) -> None:
        self._jobs.noop.delay()

    def push_noop_bulk(self, count: int) -> None:
        self._celery.group(self._jobs.noop.s() for _ in range(count)).apply_async()

    def push_pickup(self, pushed_at: float) -> None:
        self._jobs.pickup.delay(pushed_at)

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._jobs.sleeper.delay(index, seconds)

    def close(self) -> None:
        self._jobs.app.close()
