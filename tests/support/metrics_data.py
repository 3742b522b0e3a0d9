"""Per-minute metrics written straight into Redis in the layout of cogworker/store/metrics_layout.py,
for the readers' tests (the Metrics pages, ops/metrics.py) without running the workers' writer.

`write_minutes` writes what workers would have recorded: for each minute, for each class, how many
runs ended, how many failed, their total time and the histogram of their times. `durations_ms` are
the run times of one minute (the same list every minute unless `per_minute` varies them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from cogworker.store import metrics_layout as layout


@dataclass(frozen=True)
class ClassMinute:
    """One class's runs in one minute: run times in ms, and how many of them failed."""

    durations_ms: Sequence[float]
    failed: int = 0


def fields_for(job_class: str, minute: ClassMinute) -> dict[str, int]:
    found: dict[str, int] = {}
    if not minute.durations_ms:
        return found
    found[layout.field(job_class, "p")] = len(minute.durations_ms)
    if minute.failed:
        found[layout.field(job_class, "f")] = minute.failed
    total = round(sum(minute.durations_ms))
    if total:
        found[layout.field(job_class, "ms")] = total
    for ms in minute.durations_ms:
        name = layout.field(job_class, f"h{layout.bucket_of(ms)}")
        found[name] = found.get(name, 0) + 1
    return found


def write_minutes(
    r: redis.Redis,
    minutes: Sequence[int],
    classes: dict[str, Callable[[int], ClassMinute]],
) -> None:
    """For every minute, each class's runs as its function of the minute says (one pipeline)."""
    pipe = r.pipeline(transaction=False)
    for minute in minutes:
        fields: dict[str, int] = {}
        for job_class, runs in classes.items():
            fields.update(fields_for(job_class, runs(minute)))
        if fields:
            pipe.hset(layout.jobs_key(minute), mapping=fields)
            pipe.expire(layout.jobs_key(minute), layout.RETENTION_S)
    pipe.execute()


def write_queue_minutes(
    r: redis.Redis, minutes: Sequence[int], queue: str, lat_ms: Callable[[int], int]
) -> None:
    pipe = r.pipeline(transaction=False)
    for minute in minutes:
        latency = lat_ms(minute)
        if latency:
            pipe.hset(
                layout.queues_key(minute),
                mapping={
                    layout.field(queue, "lat_ms"): latency,
                    layout.field(queue, "n"): 10,
                    layout.field(queue, "wait_ms"): latency * 5,
                },
            )
    pipe.execute()


def deploy_mark(r: redis.Redis, at: float, label: str, by: str = "deploy.sh") -> None:
    """A marker as `cogworker.deploy_mark` writes it."""
    r.zadd(layout.marks_key(), {json.dumps({"at": at, "label": label, "by": by}): at})
