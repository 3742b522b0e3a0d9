"""In-memory per-minute metrics of one worker process, added to from every job thread.

Each job's end (`ended`: its class, run time, failed or not) and each pickup (`picked`: its queue
and how long it waited since `enqueued_at`) is one dict update under one lock, about a microsecond;
`take` hands the flusher (flusher.py) what was added since the last take, as the hash fields
store/metrics_layout.py defines, and starts afresh.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from cogworker.api import timestamps
from cogworker.store import metrics_layout as layout

_BOUNDS = layout.BUCKET_BOUNDS_MS
_MINUTE = layout.MINUTE_S


@dataclass(slots=True)
class Batch:
    """What a take found: per minute hash (its key), its expiry (epoch seconds) and the amounts to
    add to its fields. Empty when nothing ended or was picked up."""

    hashes: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    # Sidekiq 7's histograms (COGWORKER_SIDEKIQ_METRICS): per key, its expiry and the amounts to add
    # to its u16 counters by index. Empty unless that setting is on.
    counters: dict[str, tuple[int, dict[int, int]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.hashes) or bool(self.counters)


class MinuteRuns:
    """One class's runs in one minute (cogworker's metrics and, in the Sidekiq mode, Sidekiq 7's)."""

    __slots__ = ("buckets", "failed", "ms", "runs")

    def __init__(self) -> None:
        self.runs = 0
        self.failed = 0
        self.ms = 0.0
        self.buckets: dict[int, int] = {}


class Recorder:
    """Counts per (minute, class) and per (minute, queue) since the last `take`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[int, str], MinuteRuns] = {}
        # (minute, queue) -> [picked up, total wait ms]
        self._queues: dict[tuple[int, str], list[float]] = {}
        # Milliseconds are written as integers: the fraction a flush leaves is carried into the next
        # one of the same field, or sub-millisecond jobs would add up to a total of 0 ms. Only `take`
        # (the flusher's thread) reads or writes it.
        self._carry: dict[tuple[str, str], float] = {}

    def ended(self, job_class: str, seconds: float, failed: bool, now: float) -> None:
        """A run of `job_class` that took `seconds` ended at `now` (epoch seconds)."""
        ms = seconds * 1000.0
        bucket = bisect.bisect_left(_BOUNDS, ms)
        key = (int(now // _MINUTE), job_class)
        with self._lock:
            entry = self._jobs.get(key)
            if entry is None:
                entry = self._jobs[key] = MinuteRuns()
            entry.runs += 1
            if failed:
                entry.failed += 1
            entry.ms += ms
            entry.buckets[bucket] = entry.buckets.get(bucket, 0) + 1

    def picked(self, queue: str, enqueued_at: object, now: float) -> None:
        """A job of `queue` was picked up at `now`; it was enqueued at `enqueued_at` (epoch seconds,
        as the payload has it: anything else counts the pickup without a wait)."""
        # No isinstance over a union here: it costs half a microsecond a job.
        try:
            wait_ms = (now - enqueued_at) * 1000.0  # type: ignore[operator]
        except TypeError:
            wait_ms = 0.0
        if not wait_ms > 0.0:  # a clock behind the pusher's, nan, or Sidekiq 8's milliseconds
            wait_ms = _wait_ms(enqueued_at, now)
        key = (int(now // _MINUTE), queue)
        with self._lock:
            entry = self._queues.get(key)
            if entry is None:
                entry = self._queues[key] = [0, 0.0]
            entry[0] += 1
            entry[1] += wait_ms

    def take(self) -> Batch:
        """Everything added since the last take, as hash fields; zero amounts are left out."""
        with self._lock:
            jobs, self._jobs = self._jobs, {}
            queues, self._queues = self._queues, {}
        batch = Batch()
        for (minute, name), runs in jobs.items():
            amounts = _amounts(batch, layout.jobs_key(minute), minute)
            _add(amounts, layout.field(name, "p"), runs.runs)
            _add(amounts, layout.field(name, "f"), runs.failed)
            _add(amounts, layout.field(name, "ms"), self._whole_ms(("j", name), runs.ms))
            for index, n in runs.buckets.items():
                _add(amounts, layout.field(name, f"h{index}"), n)
        for (minute, name), (picked, wait_ms) in queues.items():
            amounts = _amounts(batch, layout.queues_key(minute), minute)
            _add(amounts, layout.field(name, "n"), int(picked))
            _add(amounts, layout.field(name, "wait_ms"), self._whole_ms(("q", name), wait_ms))
        return batch

    def _whole_ms(self, what: tuple[str, str], ms: float) -> int:
        total = ms + self._carry.pop(what, 0.0)
        whole = int(total)
        if total - whole > 0.0:
            self._carry[what] = total - whole
        return whole


def expiry_of(minute: int) -> int:
    """When a minute's hashes expire (epoch seconds): RETENTION_S after the minute ends."""
    return (minute + 1) * _MINUTE + layout.RETENTION_S


def _amounts(batch: Batch, key: str, minute: int) -> dict[str, int]:
    return batch.hashes.setdefault(key, (expiry_of(minute), {}))[1]


def _add(amounts: dict[str, int], name: str, n: int) -> None:
    if n:
        amounts[name] = amounts.get(name, 0) + n


def _wait_ms(enqueued_at: object, now: float) -> float:
    """A wait `picked` could not read as seconds: Sidekiq 8's integer milliseconds
    (api/timestamps.py), else none. Off the common path, so its checks cost seconds' payloads nothing."""
    stamp = timestamps.epoch_s(enqueued_at)
    if stamp is None or not isinstance(enqueued_at, int | float) or enqueued_at <= timestamps.MS_ABOVE:
        return 0.0
    return max(0.0, (now - stamp) * 1000.0)
