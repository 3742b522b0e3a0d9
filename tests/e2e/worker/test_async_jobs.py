"""`async def` jobs run by a real `cogworker run` worker: the body runs to completion on the
worker's event loop, failures follow the retry policy, stop requeues what is still running."""

from __future__ import annotations

import async_jobs
import redis

from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

APP = {"COGWORKER_REQUIRE": "async_jobs"}


def test_an_async_job_runs_its_body_before_it_counts_as_processed(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """The regression: the coroutine was created, never awaited, and the job counted processed."""
    async_jobs.marker.perform_async("first")
    worker = workers.start(**APP)
    wait_until(lambda: r.llen("test:async") == 1, timeout=15, message="the async job's marker")
    assert r.lrange("test:async", 0, -1) == [f"first {worker.pid}"]
    # Counted processed only once it ran: the ack rides on a later fetch (or the stop's flush).
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=10, message="processed")
    assert r.get("cogworker:stat:failed") is None
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") == 0
    assert worker.stop() == 0
    assert "was never awaited" not in worker.log_text()
