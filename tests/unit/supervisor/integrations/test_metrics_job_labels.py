"""supervisor/integrations/metrics.py: the job label bound (COGWORKER_METRICS_MAX_JOB_LABELS) and
COGWORKER_METRICS_JOB_LABELS=off, fed child messages as the supervisor would and scraped over HTTP."""

from __future__ import annotations

import redis

from cogworker.settings import load_settings
from supervisor.integrations.metrics import SwarmMetrics
from tests.support.metrics import scrape
from tests.support.redis_server import RedisServer, free_port


def entry(queue: str, job: str, processed: int) -> dict[str, object]:
    return {
        "queue": queue,
        "job": job,
        "processed": processed,
        "duration": {"sum_s": 0.1, "buckets": {"0.1": processed}},
    }


def counted(
    redis_server: RedisServer, entries: list[dict[str, object]], **settings: object
) -> dict[tuple[str, str], float]:
    metrics = SwarmMetrics(load_settings(redis_url=redis_server.url, metrics_port=free_port(), **settings))
    assert metrics.start() is not None
    try:
        for item in entries:  # one status line each, in order
            metrics.observe_status(0, {"event": "status", "busy": 0, "threads": 1, "jobs": [item]}, pid=1)
        samples = scrape(metrics.port or 0)
    finally:
        metrics.stop()
    return {
        (dict(labels)["queue"], dict(labels)["job"]): value
        for (name, labels), value in samples.items()
        if name == "cogworker_jobs_processed_total"
    }


def test_classes_past_the_bound_share_other_per_queue(redis_server: RedisServer, r: redis.Redis) -> None:
    entries = [entry("q1", "a", 1), entry("q2", "b", 2), entry("q1", "c", 4), entry("q2", "d", 8)]
    entries += [entry("q2", "a", 16), entry("q1", "c", 32)]  # a known class on a new queue keeps its label
    found = counted(redis_server, entries, metrics_max_job_labels=2)
    assert found == {
        ("q1", "a"): 1,
        ("q2", "b"): 2,
        ("q1", "(other)"): 36,
        ("q2", "(other)"): 8,
        ("q2", "a"): 16,
    }


def test_labels_off_counts_every_class_as_all(redis_server: RedisServer, r: redis.Redis) -> None:
    entries = [entry("q1", "a", 1), entry("q1", "b", 2), entry("q2", "c", 4)]
    assert counted(redis_server, entries, metrics_job_labels=False) == {
        ("q1", "(all)"): 3,
        ("q2", "(all)"): 4,
    }
