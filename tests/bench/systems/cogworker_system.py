"""cogworker, run as in production: `cogworker-swarm` forking two children.

What the harness assumes of cogworker (the contract this file codes to):
- `cogworker-swarm` is on PATH (the bench venv's console script) and needs no arguments; it reads
  COGWORKER_REDIS_URL, _REQUIRE, _COUNT, _CONCURRENCY, _QUEUES, _LOG_LEVEL and _PRELOAD.
- COGWORKER_REQUIRE=jobs_cogworker imports tests/bench/jobs_cogworker.py (tests/bench is on
  PYTHONPATH); its jobs are named jobs_cogworker.noop, .pickup and .sleeper.
- The supervisor's direct children (psutil) are the COGWORKER_COUNT workers, each running its jobs
  in-process (on threads), so a job's os.getpid() is its child's pid.
- SIGTERM to the supervisor stops the swarm within Context.stop's deadline (45 s); a child that is
  SIGKILLed is replaced without the supervisor exiting, and its jobs are requeued ("A child dies" in
  docs/architecture.md).
- Client side: cogworker.configure(cogworker.load_settings(redis_url=...)), JobFunction.perform_async
  and cogworker.push_bulk(fn, [(), ...]).
"Done" is not read from cogworker:stat:processed: every system reports through the same bench counter
(see throughput.py), so no system's own bookkeeping decides its figures.
"""

from __future__ import annotations

import importlib
import signal
from importlib import metadata
from types import ModuleType

from systems.base import ASYNC_PER_PROCESS, THREADS_PER_PROCESS, WORKER_PROCESSES, System


class Cogworker(System):
    name = "cogworker"
    bulk_label = "push_bulk"
    rolling_restart_signal = signal.SIGHUP
    w4_config = (
        f"cogworker: `cogworker-swarm`, COGWORKER_COUNT={WORKER_PROCESSES}, "
        f"COGWORKER_ASYNC_CONCURRENCY={ASYNC_PER_PROCESS} (COGWORKER_CONCURRENCY={THREADS_PER_PROCESS} "
        "job threads idle: W4 has no sync job), log level warning."
    )

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        import cogworker

        self._cogworker = cogworker
        cogworker.configure(cogworker.load_settings(redis_url=redis_url))
        self._jobs: ModuleType = importlib.import_module("jobs_cogworker")

    def worker_argv(self) -> list[str]:
        return ["cogworker-swarm"]

    def worker_env(self) -> dict[str, str]:
        # Log level warning: the peers print nothing per job by default (rq is told -l WARNING too),
        # so no system pays for per-job log lines in the figures.
        return {
            "COGWORKER_REDIS_URL": self.redis_url,
            "COGWORKER_REQUIRE": "jobs_cogworker",
            "COGWORKER_COUNT": str(WORKER_PROCESSES),
            "COGWORKER_CONCURRENCY": str(THREADS_PER_PROCESS),
            "COGWORKER_QUEUES": "default",
            "COGWORKER_LOG_LEVEL": "warning",
        }

    def many_processes(self, processes: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(), {"COGWORKER_COUNT": str(processes)}

    def sized(self, processes: int, threads: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(), {"COGWORKER_COUNT": str(processes), "COGWORKER_CONCURRENCY": str(threads)}

    def memory_variants(self) -> dict[str, dict[str, str]]:
        return {"preload": {"COGWORKER_PRELOAD": "true"}}

    def w1_variants(self) -> dict[str, dict[str, str]]:
        # The default, auto, pins a swarm with a worker per CPU (cogworker/settings_fields.py says why),
        # as the bench's 2 workers on 2 CPUs are; both placements are drained beside it, named.
        return {
            "pinned": {"COGWORKER_CPU_AFFINITY": "spread"},
            "unpinned": {"COGWORKER_CPU_AFFINITY": "none"},
        }

    def version(self) -> str:
        return metadata.version("cogworker-redis")

    def push_noop(self) -> None:
        self._jobs.noop.perform_async()

    def push_noop_bulk(self, count: int) -> None:
        self._cogworker.push_bulk(self._jobs.noop, [() for _ in range(count)])

    def push_noop_to(self, queue: str, count: int) -> None:
        """`count` no-op jobs on `queue` (the queues curve, curves/queues.py)."""
        self._cogworker.push_bulk(self._jobs.noop, [() for _ in range(count)], queue=queue)

    def push_payload_bulk(self, count: int, data: str) -> None:
        """The payload curve's jobs: `count` jobs whose one argument is `data`."""
        self._cogworker.push_bulk(self._jobs.payload, [(data,) for _ in range(count)])

    # `empty` in make bench (framework_cost.py): jobs with no body, and the list they wait on.
    queue_key = "cogworker:queue:default"

    def push_empty_bulk(self, count: int) -> None:
        self._cogworker.push_bulk(self._jobs.empty, [() for _ in range(count)])

    def push_pickup(self, pushed_at: float) -> None:
        self._jobs.pickup.perform_async(pushed_at)

    def push_io_bulk(self, count: int) -> None:
        self._cogworker.push_bulk(self._jobs.io_wait, [() for _ in range(count)])

    def push_paced(self, pushed_at: float, count: int) -> None:
        if count == 1:
            self._jobs.paced.perform_async(pushed_at)
        else:
            self._cogworker.push_bulk(self._jobs.paced, [(pushed_at,) for _ in range(count)])

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._jobs.sleeper.perform_async(index, seconds)

    def w4_argv(self) -> list[str]:
        return self.worker_argv()

    def w4_env(self) -> dict[str, str]:
        return {"COGWORKER_ASYNC_CONCURRENCY": str(ASYNC_PER_PROCESS)}

    def push_w4(self, count: int) -> None:
        self._cogworker.push_bulk(self._jobs.w4, [(i,) for i in range(count)])

    def close(self) -> None:
        # The client API has no close; its idle pool sends nothing, so it can't skew a later window.
        return None
