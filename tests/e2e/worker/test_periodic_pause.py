"""Pausing a periodic entry on two real `cogworker run` workers: an every-second entry
(tests/apps/periodic_jobs.py, which records each run's slot in `test:slots`) enqueues nothing for
the slots it is paused for, each recorded once as paused in its run history, and after the resume
runs again from the next slot, with no catch-up of the paused ones."""

from __future__ import annotations

import json
from typing import Any

import redis

from cogworker.ops import periodic as periodic_ops
from cogworker.store import keys
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

ENTRY = "periodic_jobs.every_second"
FAST = {
    "COGWORKER_REQUIRE": "periodic_jobs",
    "COGWORKER_POLL_INTERVAL_S": "0.05",
    "COGWORKER_PERIODIC_CHECK_INTERVAL_S": "0.05",
}


def history(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(keys.periodic_runs(ENTRY), 0, -1)]


def ran(r: redis.Redis) -> list[int]:
    return [int(line.split()[0]) for line in r.lrange("test:slots", 0, -1)]


def test_a_paused_entry_enqueues_nothing_and_resumes_at_the_next_slot(
    r: redis.Redis, workers: WorkerPool
) -> None:
    started = [workers.start(**FAST) for _ in range(2)]
    wait_until(lambda: len(ran(r)) >= 2, timeout=30, message="two slots run")
    assert periodic_ops.pause(r, ENTRY)
    wait_until(
        lambda: [run["outcome"] for run in history(r)[:3]] == ["paused"] * 3,
        timeout=20,
        message="three slots recorded as paused",
    )
    runs = history(r)
    paused = [run["slot"] for run in runs if run["outcome"] == "paused"]
    before = max(run["slot"] for run in runs if run["outcome"] == "enqueued")
    assert min(paused) > before
    # A run enqueued before the pause may still be running: wait for the queue to drain.
    wait_until(lambda: r.llen(keys.queue("default")) == 0, timeout=10, message="the queue drained")
    assert all(slot <= before for slot in ran(r))
    assert r.llen(keys.queue("default")) == 0

    last_paused = max(run["slot"] for run in history(r) if run["outcome"] == "paused")
    assert periodic_ops.resume(r, ENTRY)
    wait_until(
        lambda: len([s for s in ran(r) if s > last_paused]) >= 2,
        timeout=20,
        message="two runs after the resume",
    )
    for worker in started:
        assert worker.stop() == 0
    runs = history(r)
    slots = [run["slot"] for run in runs]
    assert len(slots) == len(set(slots)), runs  # each slot decided once across both workers
    paused_slots = {run["slot"] for run in runs if run["outcome"] == "paused"}
    after = sorted(s for s in ran(r) if s > before)
    assert after and not paused_slots & set(after)  # no paused slot caught up
    assert len(after) == len(set(after))
