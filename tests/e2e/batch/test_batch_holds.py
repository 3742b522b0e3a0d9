"""Holds that outlive no process (api/batch_holds.py), with real `cogworker run` workers and real
signals: a member SIGKILLed inside `current_batch().jobs()`, a member still inside it when SIGTERM's
COGWORKER_TIMEOUT_S runs out, and an app's process SIGKILLed inside `with cogworker.batch()`. Each
batch completes, and its callbacks run exactly once and never early. A live app's block keeps its
lease renewed, so its batch waits for it however long it takes; `cogworker batch release` frees a
batch whose hold still stands, once."""

from __future__ import annotations

import signal
import subprocess
import sys

import batch_jobs as bj
import redis

import cogworker
from tests.support.batches import (
    ENV,
    app_holding_a_batch,
    assert_never_early,
    runs_of,
    stop_all,
    stuck_batch,
)
from tests.support.daemon_env import QUICK_RECOVERY, clean_env
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import stays
from tests.support.workers import WorkerPool


def a_batch_with_an_adder(label: str) -> str:
    with cogworker.batch(label, on_success=bj.on_success, on_complete=bj.on_complete,
                         on_death=bj.on_death, callback_args=(label,)) as b:  # fmt: skip
        bj.adds_then_blocks.perform_async("adder")
    return b.bid


def holds(bid: str) -> int:
    status = cogworker.batch_status(bid)
    assert status is not None
    return status.holds


def assert_completed_once(r: redis.Redis, bid: str, total: int) -> None:
    assert runs_of(r, bid) == {"success": 1, "complete": 1}
    status = cogworker.batch_status(bid)
    assert status is not None
    assert (status.total, status.pending, status.failed, status.holds) == (total, 0, 0, 0), status
    assert status.held_by == {}
    assert_never_early(r)


def test_a_member_killed_inside_its_block_lets_the_batch_complete(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    bid = a_batch_with_an_adder("killed-in-block")
    doomed = workers.start(**ENV, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:started") == 1, timeout=30, message="the member inside its block")
    assert holds(bid) == 1
    doomed.signal(signal.SIGKILL)
    doomed.proc.wait(timeout=10)
    rescuer = workers.start(**ENV, **QUICK_RECOVERY)
    # Requeued after the orphan threshold (which releases the dead run's hold), run again, ended.
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=60, message="the batch's callbacks")
    stop_all(rescuer)
    assert r.get("test:tries:adder") == "2"
    assert_completed_once(r, bid, total=3)  # the adder and the member each run added


def test_a_member_inside_its_block_at_the_stop_timeout_lets_the_batch_complete(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    bid = a_batch_with_an_adder("stopped-in-block")
    stopping = workers.start(**ENV, COGWORKER_TIMEOUT_S="1", COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:started") == 1, timeout=30, message="the member inside its block")
    stopping.signal(signal.SIGTERM)
    assert stopping.proc.wait(timeout=30) == 0, stopping.log_text()[-2000:]
    assert stopping.events_named("hard_shutdown")
    assert holds(bid) == 0  # released by the requeue of the job left running
    successor = workers.start(**ENV)
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=60, message="the batch's callbacks")
    stop_all(successor)
    assert r.get("test:tries:adder") == "2"
    assert_completed_once(r, bid, total=3)


def test_an_app_killed_inside_with_batch_lets_the_batch_complete_once_its_lease_lapses(
    r: redis.Redis, redis_server: RedisServer, configured: object, workers: WorkerPool
) -> None:
    app, bid = app_holding_a_batch(redis_server.url, "app-killed", 3)
    worker = workers.start(**ENV)
    wait_until(lambda: r.scard(f"test:finished:{bid}") == 1, timeout=30, message="the member ran")
    assert r.llen("test:callbacks") == 0  # the app's block still holds the batch
    app.kill()
    app.wait(timeout=10)
    # The lease lapses 3 s after its last renewal; the worker's poller releases it.
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=30, message="the batch's callbacks")
    stop_all(worker)
    assert_completed_once(r, bid, total=1)
    assert r.zcard("cogworker:batch-leases") == 0


def test_a_live_app_block_keeps_its_batch_held_past_many_leases(
    r: redis.Redis, redis_server: RedisServer, configured: object, workers: WorkerPool
) -> None:
    app, bid = app_holding_a_batch(redis_server.url, "app-alive", 4)
    worker = workers.start(**ENV)
    wait_until(lambda: r.scard(f"test:finished:{bid}") == 1, timeout=30, message="the member ran")
    # Renewed every 1.3 s: two and a half leases later the block still holds the batch.
    stays(lambda: r.llen("test:callbacks") == 0 and holds(bid) == 1, 10.0, "the app's hold")
    r.set("test:release", "1")
    assert app.wait(timeout=30) == 0
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=30, message="the batch's callbacks")
    stop_all(worker)
    assert_completed_once(r, bid, total=1)
    assert r.zcard("cogworker:batch-leases") == 0  # the block's end took its lease's entry too


def release(redis_url: str, bid: str) -> str:
    env = clean_env()
    env["COGWORKER_REDIS_URL"] = redis_url
    done = subprocess.run([sys.executable, "-m", "cogworker", "batch", "release", bid],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cogworker_batch_release_lets_a_stuck_batch_complete_once(
    r: redis.Redis, redis_server: RedisServer, configured: object, workers: WorkerPool
) -> None:
    bid = stuck_batch(redis_server.url, "stuck")  # its lease would last an hour
    worker = workers.start(**ENV)
    wait_until(lambda: r.scard(f"test:finished:{bid}") == 1, timeout=30, message="the member ran")
    assert r.llen("test:callbacks") == 0 and holds(bid) == 1
    assert release(redis_server.url, bid) == f"batch {bid}: released 1 hold(s); now complete"
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=30, message="the batch's callbacks")
    assert release(redis_server.url, bid) == f"batch {bid}: no hold to release; now complete"
    stop_all(worker)
    assert_completed_once(r, bid, total=1)
