"""The races batches are known for, with real `cogworker run` workers (tests/apps/batch_jobs.py): a
member whose worker is SIGKILLed mid-run stays pending (not failed) until its recovered copy ends;
three workers ending a batch's last three members at the same instant push its callbacks once
(repeated); and a 10,000-member batch completes once, with every member counted."""

from __future__ import annotations

import signal
import time

import batch_jobs as bj
import redis

import cogworker
from tests.support.batches import ENV, assert_never_early, runs_of, stop_all
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

ROUNDS_BUDGET_S = 25.0


def test_a_member_killed_mid_run_stays_pending_until_its_recovered_copy_ends(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    with cogworker.batch("killed", on_success=bj.on_success, on_complete=bj.on_complete,
                         on_death=bj.on_death, callback_args=("killed",)) as b:  # fmt: skip
        bj.blocks.perform_async("blocked-1")
        bj.ok.perform_async("ok-1")
    doomed = workers.start(**ENV, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:started") == 1, timeout=20, message="the member started")
    doomed.signal(signal.SIGKILL)
    doomed.proc.wait(timeout=10)
    rescuer = workers.start(**ENV, **QUICK_RECOVERY)
    # Recovered (requeued after the orphan threshold) and running again on the rescuer.
    wait_until(lambda: r.llen("test:started") == 2, timeout=30, message="the recovered copy started")
    status = cogworker.batch_status(b.bid)
    assert status is not None
    assert (status.pending, status.failed, status.dead, status.completed_at) == (1, 0, 0, None), status
    assert r.llen("test:callbacks") == 0
    r.set("test:release", "1")
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=30, message="the callbacks")
    stop_all(rescuer)
    assert runs_of(r, b.bid) == {"success": 1, "complete": 1}
    assert_never_early(r)


def test_three_workers_ending_the_last_members_together_push_each_callback_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    trio = [workers.start(**ENV, COGWORKER_CONCURRENCY="1") for _ in range(3)]
    bids = []
    started = time.monotonic()
    while time.monotonic() - started < ROUNDS_BUDGET_S or len(bids) < 5:
        n = len(bids)
        r.delete("test:go")
        with cogworker.batch(f"round {n}", on_success=bj.on_success, on_complete=bj.on_complete,
                             callback_args=(f"round-{n}",)) as b:  # fmt: skip
            cogworker.push_bulk(bj.gated, [(f"r{n}-m{i}",) for i in range(3)])
        bids.append(b.bid)
        # Each worker (one thread each) holds one member, blocked on the gate: then all go at once.
        wait_until(
            lambda n=n: r.get("test:gated-started") == str(3 * (n + 1)), timeout=20, message="all 3 started"
        )
        r.set("test:go", "1")
        wait_until(
            lambda n=n: r.llen("test:callbacks") >= 2 * (n + 1), timeout=20, message=f"round {n} callbacks"
        )
        if len(bids) >= 40:
            break
    for worker in trio:
        stop_all(worker)
    for bid in bids:
        assert runs_of(r, bid) == {"success": 1, "complete": 1}, bid
    assert r.llen("test:callbacks") == 2 * len(bids)
    assert_never_early(r)
    print(f"FIGURE batch_last_three_rounds={len(bids)}")


def test_a_batch_of_ten_thousand_members_completes_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    pushed = time.monotonic()
    with cogworker.batch("big", on_success=bj.on_success, on_complete=bj.on_complete,
                         callback_args=("big",)) as b:  # fmt: skip
        cogworker.push_bulk(bj.ok, [(f"m{i}",) for i in range(10_000)])
    push_s = time.monotonic() - pushed
    started = time.monotonic()
    pool = [workers.start(**ENV, COGWORKER_CONCURRENCY="10") for _ in range(2)]
    wait_until(lambda: r.llen("test:callbacks") >= 2, timeout=120, message="the big batch's callbacks")
    run_s = time.monotonic() - started
    for worker in pool:
        stop_all(worker)
    assert runs_of(r, b.bid) == {"success": 1, "complete": 1}
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.done, status.pending) == (10_000, 10_000, 0)
    assert r.scard(f"test:finished:{b.bid}") == 10_000
    assert_never_early(r)
    print(f"FIGURE batch_10k push_s={push_s:.2f} run_s={run_s:.2f}")
