"""Redis outage reporting: one line when a component's outage starts, one when it ends.

A poll loop that logged every failed attempt would bury the two lines that matter (when did it
start, when did it end) under thousands of identical ones.
"""

from __future__ import annotations

import threading
import time

import structlog

from cogworker.store.connection import is_unavailable

log = structlog.get_logger("cogworker.outage")


class Outages:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}
        # Outages begun so far, any component: a reader comparing two values learns that Redis was
        # out of reach in between (reconcile.py then checks what it still owns).
        self._started = 0

    def report(self, component: str, exc: BaseException) -> None:
        """Record a failure. Unavailability is logged once per outage; other errors every time."""
        if not is_unavailable(exc):
            log.error("redis_command_failed", component=component, error=f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            if component in self._since:
                return
            self._since[component] = time.monotonic()
            self._started += 1
        log.warning("redis_outage_started", component=component, error=f"{type(exc).__name__}: {exc}")

    def recovered(self, component: str) -> None:
        with self._lock:
            since = self._since.pop(component, None)
        if since is not None:
            log.warning(
                "redis_outage_ended", component=component, lasted_s=round(time.monotonic() - since, 2)
            )

    @property
    def started(self) -> int:
        with self._lock:
            return self._started

    @property
    def down(self) -> bool:
        with self._lock:
            return bool(self._since)

    def reset(self) -> None:
        """After fork: the parent's outages are not the child's."""
        with self._lock:
            self._since.clear()
