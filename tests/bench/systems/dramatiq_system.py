"""dramatiq with its Redis broker: `dramatiq --processes 2 --threads 8`."""

from __future__ import annotations

import importlib
import signal
import sys
from importlib import metadata
from types import ModuleType

from systems.base import ASYNC_PER_PROCESS, THREADS_PER_PROCESS, WORKER_PROCESSES, System


class Dramatiq(System):
    name = "dramatiq"
    # dramatiq's main process restarts every worker process on SIGHUP (its reload).
    rolling_restart_signal = signal.SIGHUP
    bulk_label = "group().run() (no bulk path: one script call per message)"
    notes = ("dramatiq: stock RedisBroker and default middleware; INFO logging (nothing per job).",)
    w4_config = (
        f"dramatiq: `dramatiq jobs_dramatiq_async --processes {WORKER_PROCESSES} --threads "
        f"{ASYNC_PER_PROCESS}`, an async actor on the stock RedisBroker plus the AsyncIO middleware: "
        "each worker thread hands its message's coroutine to the process's one event loop thread and "
        f"waits for it, so {ASYNC_PER_PROCESS} threads = {ASYNC_PER_PROCESS} async actors at once per "
        "process; prefetch etc. default."
    )

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        import dramatiq

        self._dramatiq = dramatiq
        self._jobs: ModuleType = importlib.import_module("jobs_dramatiq")

    def worker_argv(self, processes: int = WORKER_PROCESSES, threads: int = THREADS_PER_PROCESS) -> list[str]:
        return [
            "dramatiq", "jobs_dramatiq",
            "--processes", str(processes),
            "--threads", str(threads),
            "--queues", "default",
        ]  # fmt: skip

    def many_processes(self, processes: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(processes), {}

    def sized(self, processes: int, threads: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(processes, threads), {}

    def version(self) -> str:
        return metadata.version("dramatiq")

    def push_noop(self) -> None:
        self._jobs.noop.send()

    def push_noop_bulk(self, count: int) -> None:
        self._dramatiq.group(self._jobs.noop.message() for _ in range(count)).run()

    def push_payload_bulk(self, count: int, data: str) -> None:
        """The payload curve's jobs: `count` jobs whose one argument is `data`."""
        self._dramatiq.group(self._jobs.payload.message(data) for _ in range(count)).run()

    def push_pickup(self, pushed_at: float) -> None:
        self._jobs.pickup.send(pushed_at)

    def push_io_bulk(self, count: int) -> None:
        self._dramatiq.group(self._jobs.io_wait.message() for _ in range(count)).run()

    def push_paced(self, pushed_at: float, count: int) -> None:
        for _ in range(count):  # no bulk path: one script call per message either way
            self._jobs.paced.send(pushed_at)

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._jobs.sleeper.send(index, seconds)

    def w4_argv(self) -> list[str]:
        return [
            "dramatiq", "jobs_dramatiq_async",
            "--processes", str(WORKER_PROCESSES),
            "--threads", str(ASYNC_PER_PROCESS),
            "--queues", "default",
        ]  # fmt: skip

    def push_w4(self, count: int) -> None:
        # The async module's broker (its own connection pool), so the W1 module's broker stays stock.
        jobs = importlib.import_module("jobs_dramatiq_async")
        self._dramatiq.group((jobs.w4.message(i) for i in range(count)), broker=jobs.broker).run()

    def close(self) -> None:
        self._jobs.broker.close()
        async_jobs = sys.modules.get("jobs_dramatiq_async")
        if async_jobs is not None:
            async_jobs.broker.close()
