"""The recorder of a worker process in Sidekiq 7 mode with COGWORKER_SIDEKIQ_METRICS on: it also counts
each run as Sidekiq 7 does, so the flush writes the keys Sidekiq's Metrics tab reads for Python jobs
(store/sidekiq_metrics_layout.py).

Sidekiq counts every run in `p`, a failed one in `f` too, and only a successful one's time in `ms` and
the histogram (failed runs take unpredictable times; its averages divide by p - f). Runs are counted in
the minute they ended in, as cogworker's own metrics are (Sidekiq counts them in the minute of its
flush, at most a heartbeat later). A separate class, so a process without the setting runs the plain
recorder's code and nothing more.
"""

from __future__ import annotations

import threading
from typing import Protocol

from cogworker.store import sidekiq_metrics_layout as sk
from cogworker.worker.metrics.recorder import Batch, MinuteRuns, Recorder

_MINUTE = 60


class SidekiqRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self._sk_lock = threading.Lock()
        self._sk: dict[tuple[int, str], MinuteRuns] = {}

    def ended(self, job_class: str, seconds: float, failed: bool, now: float) -> None:
        super().ended(job_class, seconds, failed, now)
        key = (int(now // _MINUTE), job_class)
        with self._sk_lock:
            entry = self._sk.get(key)
            if entry is None:
                entry = self._sk[key] = MinuteRuns()
            entry.runs += 1
            if failed:
                entry.failed += 1
            else:
                ms = seconds * 1000.0
                entry.ms += ms
                bucket = sk.bucket_of(ms)
                entry.buckets[bucket] = entry.buckets.get(bucket, 0) + 1

    def take(self) -> Batch:
        batch = super().take()
        with self._sk_lock:
            taken, self._sk = self._sk, {}
        for (minute, name), runs in taken.items():
            expire_at = sk.expiry_of(minute)
            amounts = batch.hashes.setdefault(sk.counters_key(minute), (expire_at, {}))[1]
            amounts[sk.field(name, "p")] = amounts.get(sk.field(name, "p"), 0) + runs.runs
            if runs.failed:
                amounts[sk.field(name, "f")] = amounts.get(sk.field(name, "f"), 0) + runs.failed
            # Whole milliseconds, as Sidekiq writes them, the fraction carried to the next flush.
            ms = self._whole_ms(("sk", name), runs.ms)
            if ms:
                amounts[sk.field(name, "ms")] = amounts.get(sk.field(name, "ms"), 0) + ms
            if runs.buckets:
                counters = batch.counters.setdefault(sk.histogram_key(name, minute), (expire_at, {}))[1]
                for index, n in runs.buckets.items():
                    counters[index] = counters.get(index, 0) + n
        return batch


class RecorderSettings(Protocol):
    @property
    def metrics(self) -> bool: ...
    @property
    def sidekiq_metrics(self) -> bool: ...


def new_recorder(settings: RecorderSettings) -> Recorder | None:
    """The recorder a worker process counts its runs with: None with COGWORKER_METRICS off."""
    if not settings.metrics:
        return None
    return SidekiqRecorder() if settings.sidekiq_metrics else Recorder()
