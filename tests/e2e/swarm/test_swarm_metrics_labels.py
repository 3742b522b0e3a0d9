"""The bound on the swarm's Prometheus job labels (COGWORKER_METRICS_MAX_JOB_LABELS,
COGWORKER_METRICS_JOB_LABELS), scraped from a real swarm's /metrics; and the same swarm's children
writing their per-class metrics to Redis (worker/metrics/)."""

from __future__ import annotations

from collections.abc import Callable

import demo_jobs
import pytest
import redis

from tests.support.metrics import Samples, scrape, value
from tests.support.metrics_store import summed
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


def job_series(samples: Samples, name: str = "cogworker_jobs_processed_total") -> dict[str, float]:
    return {dict(labels)["job"]: v for (n, labels), v in samples.items() if n == name}


def scraped(port: int, what: str, check: Callable[[Samples], bool]) -> Samples:
    def attempt() -> Samples | None:
        found = scrape(port)
        return found if found and check(found) else None

    result: Samples = wait_until(attempt, timeout=20, interval=0.05, message=what)
    return result


def test_classes_past_the_bound_are_counted_as_other(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    port = free_port()
    swarms.start(
        COGWORKER_METRICS_PORT=str(port),
        COGWORKER_METRICS_MAX_JOB_LABELS="2",
        COGWORKER_METRICS_FLUSH_S="0.2",
    )
    # One class at a time, each counted before the next is pushed: the first two seen get labels.
    demo_jobs.record.perform_async("a")
    scraped(port, "record counted", lambda s: job_series(s).get("demo_jobs.record") == 1)
    demo_jobs.boom_once.perform_async("fails")
    scraped(
        port,
        "boom_once counted",
        lambda s: value(s, "cogworker_jobs_failed_total", queue="default", job="demo_jobs.boom_once") == 1,
    )
    for n in range(3):
        demo_jobs.sleepy.perform_async(f"s{n}", 0.0)
    demo_jobs.record.perform_async("b")
    s = scraped(
        port,
        "the third class as (other)",
        lambda s: job_series(s).get("(other)") == 3 and job_series(s).get("demo_jobs.record") == 2,
    )
    assert set(job_series(s)) == {"demo_jobs.record", "demo_jobs.boom_once", "(other)"}
    assert value(s, "cogworker_job_duration_seconds_count", queue="default", job="(other)") == 3
    # Redis keeps every class, whatever the Prometheus bound.
    jobs = wait_until(
        lambda: (
            (j := summed(r, "j")).get("demo_jobs.sleepy|p") == 3 and j.get("demo_jobs.record|p") == 2 and j
        ),
        message="the swarm's runs in the minute hashes",
    )
    assert jobs["demo_jobs.boom_once|f"] == 1


def test_job_labels_off_is_one_series_per_queue(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    port = free_port()
    swarms.start(COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_JOB_LABELS="off")
    demo_jobs.record.perform_async("a")
    demo_jobs.sleepy.perform_async("b", 0.0)
    demo_jobs.boom_once.perform_async("c")
    s = scraped(
        port,
        "every job under (all)",
        lambda s: (
            job_series(s).get("(all)") == 2
            and value(s, "cogworker_jobs_failed_total", queue="default", job="(all)") == 1
        ),
    )
    assert set(job_series(s)) == {"(all)"}
    assert value(s, "cogworker_job_duration_seconds_count", queue="default", job="(all)") == 3
