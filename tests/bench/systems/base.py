"""What the harness needs from each system: how to start its workers and how to push its jobs.

Each system measured runs the same job bodies (jobkit.py) from its own job module, on the same bench
Redis, DB 0, which the harness flushes between steps; no two systems run at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

WORKER_PROCESSES = 2
THREADS_PER_PROCESS = 8


class System(ABC):
    name: ClassVar[str]
    bulk_label: ClassVar[str]
    # Share of W1's jobs this system drains; below 1 for a system too slow for the full count.
    w1_share: ClassVar[float] = 1.0
    notes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    @abstractmethod
    def worker_argv(self) -> list[str]:
        """The command that starts WORKER_PROCESSES workers under one parent."""

    def worker_env(self) -> dict[str, str]:
        return {}

    def memory_variants(self) -> dict[str, dict[str, str]]:
        """Extra worker environments whose memory is measured too (name -> env)."""
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

    @abstractmethod
    def close(self) -> None:
        """Release client connections before the next system runs."""
