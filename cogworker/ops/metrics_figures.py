"""The figures read from the per-minute metrics: a class's row (counts, rate, throughput, and
percentiles estimated from its histogram), a queue's series, and how they are printed and sorted.

Percentiles come from the summed histogram: the rank's bucket is found, and the value interpolated
inside it on a log scale. The bounds grow by sqrt(2) (store/metrics_layout.py), so an estimate is
never off by more than its bucket (a factor of sqrt(2)), and within 1.19 of the true value when runs
spread over their bucket. A rank in the overflow bucket is only known to be past the last bound,
and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cogworker.store import metrics_layout as layout

BOUNDS = layout.BUCKET_BOUNDS_MS
BUCKETS = len(BOUNDS) + 1
# Bucket 0 holds everything up to the first bound; its lower edge is taken one step below it, so the
# log-scale interpolation has a finite start (a run that short reads "about 1 ms" either way).
FIRST_LOWER_MS = BOUNDS[0] / (BOUNDS[1] / BOUNDS[0])
QUANTILES = (0.5, 0.95, 0.99)
SORT_KEYS = ("name", "processed", "failed", "failure_rate", "throughput", "p50", "p95", "p99", "total_ms")


@dataclass(frozen=True, slots=True)
class Percentile:
    ms: float
    over: bool = False  # True: past the last bound, `ms` is that bound

    def sort_key(self) -> float:
        return math.inf if self.over else self.ms


@dataclass(frozen=True, slots=True)
class ClassRow:
    name: str
    processed: int
    failed: int
    total_ms: int
    minutes: int
    histogram: tuple[int, ...]

    @property
    def failure_rate(self) -> float:
        return self.failed / self.processed if self.processed else 0.0

    @property
    def throughput(self) -> float:
        """Runs per minute, averaged over the whole range (quiet minutes included)."""
        return self.processed / self.minutes if self.minutes else 0.0

    @property
    def mean_ms(self) -> float | None:
        return self.total_ms / self.processed if self.processed else None

    def percentile(self, q: float) -> Percentile | None:
        return percentile(self.histogram, q)

    @property
    def p50(self) -> Percentile | None:
        return self.percentile(0.5)

    @property
    def p95(self) -> Percentile | None:
        return self.percentile(0.95)

    @property
    def p99(self) -> Percentile | None:
        return self.percentile(0.99)


QUEUE_FIELDS = {"lat_ms": "latency_ms", "n": "picked", "wait_ms": "wait_ms"}


class QueueSeries:
    """One queue's figures per minute of the window (0 where nothing was recorded)."""

    __slots__ = ("latency_ms", "picked", "wait_ms")

    def __init__(self, minutes: int) -> None:
        self.latency_ms = [0] * minutes
        self.picked = [0] * minutes
        self.wait_ms = [0] * minutes

    @property
    def mean_wait_ms(self) -> list[float | None]:
        return [w / n if n else None for w, n in zip(self.wait_ms, self.picked, strict=True)]

    @property
    def max_latency_ms(self) -> int:
        return max(self.latency_ms, default=0)

    @property
    def overall_wait_ms(self) -> float | None:
        """The mean wait of every job picked up in the window."""
        picked = sum(self.picked)
        return sum(self.wait_ms) / picked if picked else None


def percentile(histogram: Sequence[int], q: float) -> Percentile | None:
    """The q-quantile of the runs a histogram counts (None when it counts none)."""
    total = sum(histogram)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(histogram):
        if count <= 0:
            continue
        if seen + count >= rank:
            if index >= len(BOUNDS):
                return Percentile(BOUNDS[-1], over=True)
            lower = BOUNDS[index - 1] if index else FIRST_LOWER_MS
            upper = BOUNDS[index]
            fraction = max(0.0, (rank - seen) / count)
            return Percentile(lower * (upper / lower) ** fraction)
        seen += count
    return Percentile(BOUNDS[-1], over=True)  # unreachable with non-negative counts


def bucket_label(index: int) -> str:
    """A bucket's label: "≤ 2.8 ms", or "> 70 min" for the overflow bucket."""
    if index >= len(BOUNDS):
        return "> " + format_ms(BOUNDS[-1])
    return "≤ " + format_ms(BOUNDS[index])


def format_ms(ms: float) -> str:
    if ms < 10:
        return f"{ms:.2g} ms" if ms < 1 else f"{ms:.1f}".rstrip("0").rstrip(".") + " ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3g} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.3g} min"
    return f"{ms / 3_600_000:.3g} h"


def format_percentile(value: Percentile | None) -> str:
    if value is None:
        return "\u2013"
    return ("> " if value.over else "") + format_ms(value.ms)


def rows_from_sums(sums: dict[str, int], minutes: int) -> list[ClassRow]:
    per_class: dict[str, dict[str, int]] = {}
    for name, value in sums.items():
        job_class, suffix = layout.split_field(name)
        if job_class:
            per_class.setdefault(job_class, {})[suffix] = value
    rows = []
    for job_class, values in per_class.items():
        histogram = tuple(values.get(f"h{i}", 0) for i in range(BUCKETS))
        rows.append(
            ClassRow(
                name=job_class,
                processed=values.get("p", 0),
                failed=values.get("f", 0),
                total_ms=values.get("ms", 0),
                minutes=minutes,
                histogram=histogram,
            )
        )
    return rows


def sort_rows(rows: list[ClassRow], key: str, descending: bool) -> list[ClassRow]:
    """Rows sorted by one of SORT_KEYS (a class with no runs sorts after every run), ties by name."""
    if key not in SORT_KEYS:
        key = "processed"
    by_name = sorted(rows, key=lambda row: row.name)
    if key == "name":
        return list(reversed(by_name)) if descending else by_name

    def value(row: ClassRow) -> float:
        found = getattr(row, key)
        if isinstance(found, Percentile):
            return found.sort_key()
        if found is None:
            return -math.inf if descending else math.inf
        return float(found)

    return sorted(by_name, key=value, reverse=descending)
