"""A concurrent limiter of 3 in a real swarm of 2 children x 8 threads: the jobs themselves count the
holders (never more than 3, and 3 reached), every job runs, none fails, and the put-backs are counted
in Redis and in the swarm's Prometheus metrics (`cogworker_jobs_limited_total`)."""

from __future__ import annotations

import limiter_jobs
import pytest
import redis

from cogworker.store import keys
from tests.support import metrics
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.swarm import SwarmRunner

JOBS = 30
APP = {
    "COGWORKER_REQUIRE": "limiter_jobs",
    "COGWORKER_COUNT": "2",
    "COGWORKER_CONCURRENCY": "8",
    "COGWORKER_POLL_INTERVAL_S": "0.2",
}


@pytest.fixture(autouse=True)
def _jobs_see_the_test_redis(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_server.url)


def limited_metric(port: int) -> float | None:
    return metrics.value(metrics.scrape(port), "cogworker_jobs_limited_total", queue="default", job=JOB)


JOB = "limiter_jobs.three_at_once"


def test_a_concurrent_limiter_of_3_never_has_more_than_3_holders(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    port = free_port()
    swarm = swarms.start(COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1", **APP)
    swarm.wait_ready(timeout=60)
    for i in range(JOBS):
        limiter_jobs.three_at_once.perform_async(f"j{i}", 0.2)
    wait_until(lambda: r.llen("test:ran") == JOBS, timeout=120, message=f"{JOBS} jobs to run")
    seen = [int(n) for n in r.lrange("test:seen", 0, -1)]
    assert max(seen) == 3, seen  # never more, and the limit was reached
    assert r.get(keys.STAT_FAILED) is None and r.zcard(keys.DEAD) == 0 and r.zcard(keys.RETRY) == 0
    limited = int(r.get(keys.stat("limited")) or 0)
    assert limited > 0
    wait_until(lambda: limited_metric(port) == limited, timeout=20, message=f"the metric at {limited}")
    assert swarm.stop() == 0
