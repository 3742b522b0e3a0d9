"""Per-(queue, job) counts a worker sends the supervisor with each status message, for Prometheus.

Each finished job is counted once, in the bucket of the smallest duration bound it fits under (not
cumulatively), with the total time; the supervisor turns these deltas into counters and a histogram.
The bounds live here so a worker process never has to import prometheus_client.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cogworker.worker.metrics.recorder import Recorder

DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
# One status line must stay well under the pipe protocol's 64 KB line limit.
MAX_ENTRIES_PER_MESSAGE = 200


def format_bound(bound: float) -> str:
    """A bucket's upper bound as text, as Prometheus writes `le`: "0.005", "1.0", "+Inf"."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


_BOUND_KEYS = tuple((bound, format_bound(bound)) for bound in DURATION_BUCKETS_S)


def bucket_key(seconds: float) -> str:
    """The key of the bucket a job that took `seconds` is counted in."""
    for bound, key in _BOUND_KEYS:
        if seconds <= bound:
            return key
    return "+Inf"


class JobCounts:
    """Counts since the last `take()`, safe to add to from every job thread. `recorder`: where each
    run's end is also counted for the per-class metrics in Redis (worker/metrics/), if they are on."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], dict[str, Any]] = {}
        self.recorder = recorder

    def add(self, queue: str, job: str, seconds: float, *, failed: bool = False, dead: bool = False) -> None:
        self._add(queue, job, seconds, "failed" if failed else "processed", dead=dead)
        if self.recorder is not None:
            self.recorder.ended(job, seconds, failed, time.time())

    def ended_unrun(self, queue: str, job: str, outcome: str) -> None:
        """A job that ended without running (keys.ENDED_UNRUN: expired, cancelled), or that a rate
        limiter put back (limited): counted under its outcome, with no duration."""
        self._add(queue, job, None, outcome)

    def _add(self, queue: str, job: str, seconds: float | None, outcome: str, *, dead: bool = False) -> None:
        with self._lock:
            entry = self._entries.get((queue, job))
            if entry is None:
                entry = self._entries[(queue, job)] = {
                    "queue": queue,
                    "job": job,
                    "processed": 0,
                    "failed": 0,
                    "retried": 0,
                    "dead": 0,
                    "expired": 0,
                    "cancelled": 0,
                    "limited": 0,
                    "duration": {"sum_s": 0.0, "buckets": {}},
                }
            entry[outcome] += 1
            if outcome == "failed":
                entry["dead" if dead else "retried"] += 1
            if seconds is None:
                return
            key = bucket_key(seconds)
            duration = entry["duration"]
            duration["sum_s"] += seconds
            duration["buckets"][key] = duration["buckets"].get(key, 0) + 1

    def take(self) -> list[dict[str, Any]]:
        """The entries since the last take (at most MAX_ENTRIES_PER_MESSAGE; the rest wait)."""
        with self._lock:
            if len(self._entries) <= MAX_ENTRIES_PER_MESSAGE:
                taken, self._entries = list(self._entries.values()), {}
                return taken
            keys = list(self._entries)[:MAX_ENTRIES_PER_MESSAGE]
            return [self._entries.pop(k) for k in keys]
