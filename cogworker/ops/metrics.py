"""Reading the per-minute metrics the workers record (the layout is `store/metrics_layout.py`): the
per-class table, one class's series and histogram, the queues' latency, and the deploy markers.

A range is 1, 4 or 8 hours ending with the current minute. Its minute hashes are read in one
pipeline (HGETALL each; one class's page HMGETs only its fields), and a long-lived reader passes a
`MinuteCache` (ops/metrics_cache.py) so finished minutes are read once. A minute nobody wrote is
zero (the series show the gap as zeros, never a line drawn across it). A value that isn't a count,
or a key of the wrong type, is skipped and named in `notes`, so a damaged key costs a line on the
page, not the page.

The figures themselves (rows, percentiles, formats) are in ops/metrics_figures.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker.ops import metrics_figures as figures
from cogworker.ops.metrics_cache import MinuteCache, last_final_minute, summed
from cogworker.ops.metrics_figures import ClassRow, Percentile, QueueSeries
from cogworker.store import metrics_layout as layout

RANGES_H = (1, 4, 8)
DEFAULT_RANGE_H = 1


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


def _counts(reply: Any, key: str, notes: _Notes) -> tuple[dict[str, int], bool]:
    """One minute's counts, and whether all of them were whole. The minute is tried at once (this
    loop is the page's cost); one with a bad value is redone field by field, noting the bad ones."""
    if isinstance(reply, Exception):
        notes.key(key, reply)
        return {}, False
    fields: dict[str, Any] = reply if isinstance(reply, dict) else {}
    try:
        counts = {name: int(raw) for name, raw in fields.items()}
        if all(value >= 0 for value in counts.values()):
            return counts, True
    except ValueError:
        pass
    counts = {}
    for name, raw in fields.items():
        value = _count(raw)
        if value is None:
            notes.value(key, name)
        else:
            counts[name] = value
    return counts, False


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


def overview(
    client: redis.Redis, hours: int, now: float | None = None, cache: MinuteCache | None = None
) -> Overview:
    """Every class's totals and histogram over the range, every queue's latency per minute. With
    a `cache` (a long-lived reader's), finished minutes already read aren't read again."""
    now_s = time.time() if now is None else now
    win = window(hours, now_s)
    minutes = win.minutes
    notes = _Notes()
    last_final = last_final_minute(now_s)
    known, to_read = cache.plan(minutes, last_final) if cache is not None else ([], minutes)
    job_keys = [layout.jobs_key(m) for m in to_read]
    queue_keys = [layout.queues_key(m) for m in minutes]
    replies = _fetch(client, [*job_keys, *queue_keys], None)
    read = [
        (m, *_counts(reply, key, notes)) for m, key, reply in zip(to_read, job_keys, replies, strict=False)
    ]
    if cache is not None:
        oldest = win.last - max(RANGES_H) * 60 + 1
        cache.keep(((m, counts) for m, counts, clean in read if clean), last_final, oldest)
    # Summed by raw field first: the field names are split once each, not once per minute.
    sums = summed([*known, *(counts for _, counts, _ in read)])
    queues: dict[str, QueueSeries] = {}
    for offset, (key, reply) in enumerate(zip(queue_keys, replies[len(job_keys) :], strict=True)):
        for name, raw in _hash(reply, key, notes).items():
            queue, suffix = layout.split_field(name)
            value = _count(raw)
            if value is None:
                notes.value(key, name)
            elif suffix in figures.QUEUE_FIELDS:
                series = queues.get(queue)
                if series is None:
                    series = queues[queue] = QueueSeries(len(minutes))
                getattr(series, figures.QUEUE_FIELDS[suffix])[offset] = value
    classes = figures.rows_from_sums(sums, len(minutes))
    found_marks = marks(client, win, notes)
    return Overview(win, classes, dict(sorted(queues.items())), found_marks, notes.lines())


def _class_values(reply: Any, key: str, fields: list[str], notes: _Notes) -> tuple[tuple[int, ...], bool]:
    """One minute's HMGET of a class's fields as counts (0 where absent), and whether all were whole."""
    if isinstance(reply, Exception):
        notes.key(key, reply)
        return (0,) * len(fields), False
    values, clean = [0] * len(fields), True
    for index, raw in enumerate(reply):
        if raw is not None:
            value = _count(raw)
            if value is None:
                notes.value(key, fields[index])
                clean = False
            else:
                values[index] = value
    return tuple(values), clean


def class_detail(
    client: redis.Redis,
    job_class: str,
    hours: int,
    now: float | None = None,
    cache: MinuteCache | None = None,
) -> ClassDetail:
    """One class over the range: its series per minute and its histogram. Reads only its own
    fields of each minute (HMGET), not the other classes', and with a `cache` only the minutes
    not already kept."""
    now_s = time.time() if now is None else now
    win = window(hours, now_s)
    minutes = win.minutes
    notes = _Notes()
    suffixes = ["p", "f", "ms", *(f"h{i}" for i in range(figures.BUCKETS))]
    fields = [layout.field(job_class, s) for s in suffixes]
    last_final = last_final_minute(now_s)
    known = cache.class_minutes(job_class, minutes, last_final) if cache is not None else {}
    to_read = [m for m in minutes if m not in known]
    job_keys = [layout.jobs_key(m) for m in to_read]
    replies = _fetch(client, job_keys, fields)
    read = {
        m: _class_values(reply, key, fields, notes)
        for m, key, reply in zip(to_read, job_keys, replies, strict=True)
    }
    if cache is not None:
        finished = {m: values for m, (values, clean) in read.items() if clean and m <= last_final}
        cache.keep_class(job_class, finished, win.last - max(RANGES_H) * 60 + 1)
    processed, failed, mean_ms, p95 = [], [], [], []
    totals = [0] * len(suffixes)
    for minute in minutes:
        values = known[minute] if minute in known else read[minute][0]
        totals = [a + b for a, b in zip(totals, values, strict=True)]
        processed.append(values[0])
        failed.append(values[1])
        mean_ms.append(values[2] / values[0] if values[0] else None)
        p95.append(figures.percentile(values[3:], 0.95))
    row = ClassRow(job_class, totals[0], totals[1], totals[2], len(minutes), tuple(totals[3:]))
    found_marks = marks(client, win, notes)
    return ClassDetail(win, row, processed, failed, mean_ms, p95, found_marks, notes.lines())
