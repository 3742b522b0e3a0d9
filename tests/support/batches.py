"""What the batch tests share (tests/apps/batch_jobs.py records; api/batch.py under test): the
callbacks that ran, and the check that each ran exactly once and never before its batch was done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import redis

from tests.support.redis_server import wait_until
from tests.support.workers import Worker

# Workers read the members' queue and the callbacks' queue; the poller moves retries quickly.
ENV = {
    "COGWORKER_REQUIRE": "batch_jobs",
    "COGWORKER_QUEUES": "default,callbacks",
    "COGWORKER_POLL_INTERVAL_S": "0.1",
}


def callbacks(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange("test:callbacks", 0, -1)]


def runs_of(r: redis.Redis, bid: str) -> Counter[str]:
    """How many times each callback kind of batch `bid` ran."""
    return Counter(record["kind"] for record in callbacks(r) if record["bid"] == bid)


def assert_never_early(r: redis.Redis, children: dict[str, int] | None = None) -> None:
    """Every success/complete callback saw its batch complete with nothing pending, and every member
    it counted had recorded its end (its members record theirs before their ack). `children`: bid ->
    how many child batches it has (a child is a member that records nothing itself)."""
    for record in callbacks(r):
        record["finished"] += (children or {}).get(record["bid"], 0)
        if record["kind"] == "death":
            assert record["dead"] >= 1, record
            continue
        assert record["complete"] and record["pending"] == 0, record
        if record["kind"] == "success":
            assert record["failed"] == 0 and record["finished"] == record["total"], record
        else:
            assert record["finished"] + record["failed"] == record["total"], record


def stop_all(*workers: Worker) -> None:
    """Stop each worker once it has booted (a worker still importing when SIGTERM comes dies of it:
    under load one worker may do all the work before another is up), checking it stopped cleanly."""
    for worker in workers:
        worker.identity(timeout=60)
    for worker in workers:
        assert worker.stop() == 0, worker.log_text()[-2000:]


def app_holding_a_batch(redis_url: str, label: str, lease_s: float) -> tuple[subprocess.Popen[bytes], str]:
    """An app's process inside `with cogworker.batch(label)` (batch_jobs.hold_open) with a lease of
    `lease_s`, once it pushed its member: the process and the batch's bid."""
    env = {**os.environ, "COGWORKER_REDIS_URL": redis_url, "COGWORKER_BATCH_HOLD_LEASE_S": str(lease_s)}
    code = f"import batch_jobs; batch_jobs.hold_open({label!r})"
    app = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        wait_until(lambda: client.exists("test:app-bid"), timeout=30, message="the app opened its batch")
        return app, str(client.get("test:app-bid"))
    finally:
        client.close()


def stuck_batch(redis_url: str, label: str) -> str:
    """A batch held by an app's process that was SIGKILLed inside its block, with a lease far longer
    than any test: only `cogworker batch release` lets it complete. Its one member is queued."""
    app, bid = app_holding_a_batch(redis_url, label, 3600)
    app.kill()
    app.wait(timeout=10)
    return bid
