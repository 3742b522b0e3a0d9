"""Reading the per-minute metrics the workers record (the layout is `store/metrics_layout.py`): the
per-class table, one class's series and histogram, the queues' latency, and the deploy markers.

A range is 1, 4 or 8 hours ending with the current minute. Its minute hashes are read in one
pipeline. A minute nobody wrote is zero (the series show the gap as zeros, never a line drawn across
it). A value that isn't a count, or a key of the wrong type, is skipped and named in `notes`, so a
damaged key costs a line on the page, not the page.

Percentiles come from the summed histogram: the rank's bucket is found, and the value interpolated
inside it on a log scale (the buckets grow by sqrt(2), so the estimate is within that factor of the
truth, and usually much closer). A rank in the overflow bucket is only known to be past the last bound.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker.store import metrics_layout as layout

RANGES_H = (1, 4, 8)
DEFAULT_RANGE_H = 1
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


@dataclass(frozen=True, slots=True)
class Mark:
    at: float
    label: str
    by: str


@dataclass(frozen=True, slots=True)
class Window:
    """The minutes of a range: `first` to `last` inclusive (minute numbers, epoch / 60)."""

    hours: int
    first: int
    last: int

    @property
    def minutes(self) -> list[int]:
        return list(range(self.first, self.last + 1))

    @property
    def start_s(self) -> float:
        return float(self.first * layout.MINUTE_S)

    @property
    def end_s(self) -> float:
        return float((self.last + 1) * layout.MINUTE_S)


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


@dataclass
class Overview:
    window: Window
    classes: list[ClassRow]
    queues: dict[str, QueueSeries]
    marks: list[Mark]
    notes: list[str] = field(default_factory=list)


@dataclass
class ClassDetail:
    window: Window
    row: ClassRow
    processed: list[int]
    failed: list[int]
    mean_ms: list[float | None]
    p95_ms: list[Percentile | None]
    marks: list[Mark]
    notes: list[str] = field(default_factory=list)


def clamp_range(value: object) -> int:
    """A range in hours from a query parameter: one of RANGES_H, else the default."""
    try:
        hours = int(str(value))
    except ValueError:
        return DEFAULT_RANGE_H
    return hours if hours in RANGES_H else DEFAULT_RANGE_H


def window(hours: int, now: float | None = None) -> Window:
    last = layout.minute_of(time.time() if now is None else now)
    return Window(hours, last - hours * 60 + 1, last)


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


def _count(raw: Any) -> int | None:
    """A stored count, or None when it isn't one (text, a negative number, a float)."""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _fetch(client: redis.Redis, keys_: Iterable[str], fields: Sequence[str] | None) -> list[Any]:
    """HGETALL (or HMGET of `fields`) per key, in one pipeline; errors come back as values."""
    pipe = client.pipeline(transaction=False)
    for key in keys_:
        if fields is None:
            pipe.hgetall(key)
        else:
            pipe.hmget(key, list(fields))
    return list(pipe.execute(raise_on_error=False))


class _Notes:
    """Collects what was skipped, one line per kind of damage (with how many and an example)."""

    def __init__(self) -> None:
        self.bad_values: dict[str, tuple[int, str]] = {}
        self.bad_keys: list[tuple[str, str]] = []

    def value(self, key: str, name: str) -> None:
        count, example = self.bad_values.get(key, (0, name))
        self.bad_values[key] = (count + 1, example)

    def key(self, key: str, error: object) -> None:
        self.bad_keys.append((key, str(error)))

    def lines(self) -> list[str]:
        found = [f"Skipped {key} (unreadable: {error})." for key, error in self.bad_keys[:5]]
        if len(self.bad_keys) > 5:
            found.append(f"…and {len(self.bad_keys) - 5} more unreadable keys.")
        for key, (count, example) in list(self.bad_values.items())[:5]:
            found.append(f"Skipped {count} field(s) of {key} that aren't counts (e.g. {example!r}).")
        if len(self.bad_values) > 5:
            found.append(f"…and bad fields in {len(self.bad_values) - 5} more keys.")
        return found


def _hash(reply: Any, key: str, notes: _Notes) -> dict[str, Any]:
    if isinstance(reply, Exception):
        notes.key(key, reply)
        return {}
    return reply if isinstance(reply, dict) else {}


def _add_counts(sums: dict[str, int], fields: dict[str, Any], key: str, notes: _Notes) -> None:
    """Adds one minute's counts to `sums`. The whole minute is tried at once (this loop is the
    page's cost: 8 h of 50 classes is about 200,000 fields); a minute with a bad value is redone
    field by field, skipping and noting the bad ones."""
    get = sums.get
    added: dict[str, int] = {}
    try:
        for name, raw in fields.items():
            value = int(raw)
            if value < 0:
                raise ValueError(name)
            added[name] = value
    except ValueError:
        added = {}
        for name, raw in fields.items():
            counted = _count(raw)
            if counted is None:
                notes.value(key, name)
            else:
                added[name] = counted
    for name, value in added.items():
        sums[name] = get(name, 0) + value


def marks(client: redis.Redis, win: Window, notes: _Notes | None = None) -> list[Mark]:
    """The deploy markers inside the window, oldest first (a member that isn't the JSON the
    writer makes is skipped and noted)."""
    notes = notes if notes is not None else _Notes()
    try:
        raw = client.zrangebyscore(layout.marks_key(), win.start_s, win.end_s, withscores=True)
    except redis.ResponseError as exc:
        notes.key(layout.marks_key(), exc)
        return []
    found = []
    pairs: list[tuple[str, float]] = list(raw)  # type: ignore[arg-type]  # withscores: (member, score)
    for member, score in pairs:
        try:
            data = json.loads(member)
            found.append(Mark(at=float(score), label=str(data.get("label", "")), by=str(data.get("by", ""))))
        except (ValueError, AttributeError):
            notes.value(layout.marks_key(), str(member)[:40])
    return found


def overview(client: redis.Redis, hours: int, now: float | None = None) -> Overview:
    """Every class's totals and histogram over the range, every queue's latency per minute."""
    win = window(hours, now)
    minutes = win.minutes
    notes = _Notes()
    job_keys = [layout.jobs_key(m) for m in minutes]
    queue_keys = [layout.queues_key(m) for m in minutes]
    replies = _fetch(client, [*job_keys, *queue_keys], None)
    # Summed by raw field first: the field names are split once each, not once per minute.
    sums: dict[str, int] = {}
    for key, reply in zip(job_keys, replies, strict=False):
        _add_counts(sums, _hash(reply, key, notes), key, notes)
    queues: dict[str, QueueSeries] = {}
    for offset, (key, reply) in enumerate(zip(queue_keys, replies[len(job_keys) :], strict=True)):
        for name, raw in _hash(reply, key, notes).items():
            queue, suffix = layout.split_field(name)
            value = _count(raw)
            if value is None:
                notes.value(key, name)
            elif suffix in QUEUE_FIELDS:
                series = queues.get(queue)
                if series is None:
                    series = queues[queue] = QueueSeries(len(minutes))
                getattr(series, QUEUE_FIELDS[suffix])[offset] = value
    classes = _rows(sums, len(minutes))
    found_marks = marks(client, win, notes)
    return Overview(win, classes, dict(sorted(queues.items())), found_marks, notes.lines())


def _rows(sums: dict[str, int], minutes: int) -> list[ClassRow]:
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


def class_detail(client: redis.Redis, job_class: str, hours: int, now: float | None = None) -> ClassDetail:
    """One class over the range: its series per minute and its histogram. Reads only its own
    fields of each minute (HMGET), not the other classes'."""
    win = window(hours, now)
    minutes = win.minutes
    notes = _Notes()
    suffixes = ["p", "f", "ms", *(f"h{i}" for i in range(BUCKETS))]
    fields = [layout.field(job_class, s) for s in suffixes]
    job_keys = [layout.jobs_key(m) for m in minutes]
    replies = _fetch(client, job_keys, fields)
    processed, failed, mean_ms, p95 = [], [], [], []
    totals = [0] * len(suffixes)
    for key, reply in zip(job_keys, replies, strict=True):
        values = [0] * len(suffixes)
        if isinstance(reply, Exception):
            notes.key(key, reply)
        else:
            for index, raw in enumerate(reply):
                if raw is None:
                    continue
                value = _count(raw)
                if value is None:
                    notes.value(key, fields[index])
                else:
                    values[index] = value
        totals = [a + b for a, b in zip(totals, values, strict=True)]
        processed.append(values[0])
        failed.append(values[1])
        mean_ms.append(values[2] / values[0] if values[0] else None)
        p95.append(percentile(values[3:], 0.95))
    row = ClassRow(job_class, totals[0], totals[1], totals[2], len(minutes), tuple(totals[3:]))
    found_marks = marks(client, win, notes)
    return ClassDetail(win, row, processed, failed, mean_ms, p95, found_marks, notes.lines())
