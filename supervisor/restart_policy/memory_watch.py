"""Memory watch: with COGWORKER_MAXMEM_MB, a child whose RSS is over the limit is restarted gracefully.

Checked every `memory_check_interval_s` rather than on every loop turn: reading /proc for each child
costs little, but nothing about memory needs sub-second reaction, and a slow leak is what this is for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

MB = 1024 * 1024


def rss_bytes(pid: int) -> int | None:
    """Resident set size of `pid`, or None when it is gone or can't be read."""
    import psutil  # here: a swarm without COGWORKER_MAXMEM_MB doesn't load it (the supervisor stays small)

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


class MemoryWatch:
    def __init__(
        self,
        limit_mb: int | None,
        interval_s: float,
        clock: Callable[[], float],
        rss: Callable[[int], int | None] = rss_bytes,
    ) -> None:
        self.limit_mb = limit_mb
        self._interval_s = interval_s
        self._clock = clock
        self._rss = rss
        self._next_at = clock() + interval_s

    @property
    def enabled(self) -> bool:
        return self.limit_mb is not None

    def due(self) -> bool:
        if not self.enabled or self._clock() < self._next_at:
            return False
        self._next_at = self._clock() + self._interval_s
        return True

    def next_due_in(self) -> float | None:
        return max(0.0, self._next_at - self._clock()) if self.enabled else None

    def over_limit(self, pids: Iterable[int]) -> list[tuple[int, int]]:
        """(pid, rss bytes) for every child above the limit."""
        if self.limit_mb is None:
            return []
        limit = self.limit_mb * MB
        found = []
        for pid in pids:
            rss = self._rss(pid)
            if rss is not None and rss > limit:
                found.append((pid, rss))
        return found
