"""What the harness needs from each system: how to start its workers and how to push its jobs.

Each system measured runs the same job bodies (jobkit.py) from its own job module, on the same bench
Redis, DB 0, which the harness flushes between steps; no two systems run at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

WORKER_PROCESSES = 2
THREADS_PER_PROCESS = 8
# The memory step's second size: what a deployment that fills a bigger machine costs.
MANY_PROCESSES = 8
# W4: `async def` jobs running at once in each of the WORKER_PROCESSES worker processes.
ASYNC_PER_PROCESS = 500
# The steps bench.py runs for a system that has every workload (W4 only where w4_argv is not None).
ALL_STEPS = ("enqueue", "w1", "w2+idle", "memory", "w3")


class System(ABC):
    name: ClassVar[str]
    bulk_label: ClassVar[str]
    # Share of W1's jobs this system drains; below 1 for a system too slow for the full count.
    w1_share: ClassVar[float] = 1.0
    notes: ClassVar[tuple[str, ...]] = ()
    steps: ClassVar[tuple[str, ...]] = ALL_STEPS
    # W4's exact worker configuration, in words, for the notes under the table.
    w4_config: ClassVar[str] = ""
    # The signal that makes the worker command replace its workers one by one; None: it has none.
    rolling_restart_signal: ClassVar[int | None] = None
    # The command the jobs' INCR of the done counter arrives as (redis-py sends INCRBY key 1).
    done_command: ClassVar[str] = "incrby"

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    @abstractmethod
    def worker_argv(self) -> list[str]:
        """The command that starts WORKER_PROCESSES workers under one parent."""

    def worker_env(self) -> dict[str, str]:
        return {}

    def many_processes(self, processes: int) -> tuple[list[str], dict[str, str]] | None:
        """The worker command and extra environment for `processes` worker processes (the memory
        step at MANY_PROCESSES); None: not measured that way."""
        return None

    def sized(self, processes: int, threads: int) -> tuple[list[str], dict[str, str]] | None:
        """The worker command and extra environment for `processes` worker processes of `threads` job
        threads each (curves/procs.py); None: the system can't be sized so."""
        return None

    def push_io_bulk(self, count: int) -> None:
        """Push `count` jobs that each wait 10 ms on I/O, then report as the no-op does (jobkit.io_wait)."""
        raise NotImplementedError

    def push_paced(self, pushed_at: float, count: int) -> None:
        """Push `count` load-curve jobs (jobkit.record_paced) carrying `pushed_at`, the fastest way the
        system's client has for that many (one job: its single push)."""
        raise NotImplementedError

    def memory_variants(self) -> dict[str, dict[str, str]]:
        """Extra worker environments whose memory is measured too (name -> env)."""
        return {}

    def w1_variants(self) -> dict[str, dict[str, str]]:
        """Extra worker environments W1 drains too, in the same rounds (name -> env)."""
        return {}

    @abstractmethod
    def version(self) -> str: ...

    @abstractmethod
    def push_noop(self) -> None: ...

    @abstractmethod
    def push_noop_bulk(self, count: int) -> None: ...

    @abstractmethod
    def push_pickup(self, pushed_at: float) -> None: ...

    @abstractmethod
    def push_sleeper(self, index: int, seconds: float) -> None: ...

    def w4_argv(self) -> list[str] | None:
        """The command that starts WORKER_PROCESSES workers running ASYNC_PER_PROCESS `async def` jobs
        at once each; None: the system has no async jobs, and no W4."""
        return None

    def w4_env(self) -> dict[str, str]:
        """W4's worker environment, on top of worker_env()."""
        return {}

    def push_w4(self, count: int) -> None:
        """Push W4 jobs 0 .. count-1 (jobkit.w4_job)."""
        raise NotImplementedError

    @abstractmethod
    def close(self) -> None:
        """Release client connections before the next system runs."""


class AsyncOnlySystem(System):
    """A peer measured in W4 alone (arq, SAQ): it has no sync jobs to run W1-W3 with."""

    bulk_label = "—"
    steps: ClassVar[tuple[str, ...]] = ()

    def worker_argv(self) -> list[str]:
        argv = self.w4_argv()
        assert argv is not None
        return argv

    def _no_sync_jobs(self) -> None:
        raise NotImplementedError(f"{self.name} is measured in W4 only")

    def push_noop(self) -> None:
        self._no_sync_jobs()

    def push_noop_bulk(self, count: int) -> None:
        self._no_sync_jobs()

    def push_pickup(self, pushed_at: float) -> None:
        self._no_sync_jobs()

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._no_sync_jobs()
