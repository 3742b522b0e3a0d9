"""Batches with real `cogworker run` workers (tests/apps/batch_jobs.py): a member retried then
successful, a member that goes to dead, members pushed by a member, and batches nested three deep.
In each, every callback runs exactly once, and never before its batch is done."""

from __future__ import annotations

import batch_jobs as bj
import redis

import cogworker
from tests.support.batches import ENV, assert_never_early, callbacks, runs_of, stop_all
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool


def settle_quietly(r: redis.Redis, count: int) -> None:
    """Wait for `count` callbacks, then stop: a stopped worker runs nothing more, so any callback
    still to come (a second run) would be in the list when the test looks."""
    wait_until(lambda: r.llen("test:callbacks") >= count, timeout=30, message=f"{count} callbacks")


def test_a_member_retried_then_successful_counts_once_and_the_batch_succeeds(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    with cogworker.batch("retried", on_success=bj.on_success, on_complete=bj.on_complete,
                         on_death=bj.on_death, callback_args=("retried",)) as b:  # fmt: skip
        bj.flaky.perform_async("flaky-1")
        bj.ok.perform_async("plain-1")
    worker = workers.start(**ENV)
    settle_quietly(r, 2)
    stop_all(worker)
    assert r.get("test:tries:flaky-1") == "2"  # it failed once, then succeeded
    assert runs_of(r, b.bid) == {"success": 1, "complete": 1}
    status = cogworker.batch_status(b.bid)
    assert status is not None
    assert (status.total, status.pending, status.done, status.failed) == (2, 0, 2, 0)
    assert status.failures == {}
    assert {c.kind: c.state for c in status.callbacks} == {
        "success": "done",
        "complete": "done",
        "death": "waiting",
    }
    assert_never_early(r)


def test_a_member_that_goes_to_dead_fires_on_death_and_on_complete_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    with cogworker.batch("dying", on_success=bj.on_success, on_complete=bj.on_complete,
                         on_death=bj.on_death, callback_args=("dying",)) as b:  # fmt: skip
        dead_jid = bj.dies.perform_async("dies-1")
        bj.ok.perform_async("ok-1")
    worker = workers.start(**ENV)
    settle_quietly(r, 2)
    stop_all(worker)
    assert runs_of(r, b.bid) == {"death": 1, "complete": 1}
    status = cogworker.batch_status(b.bid)
    assert status is not None
    assert (status.total, status.pending, status.failed, status.dead) == (2, 0, 1, 1)
    assert status.failures == {dead_jid: "RuntimeError: dies-1 dies"}
    assert status.state == "complete with failures"
    assert_never_early(r)


def test_members_pushed_by_a_member_are_waited_for(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    with cogworker.batch("spawning", on_success=bj.on_success, on_complete=bj.on_complete,
                         callback_args=("spawning",)) as b:  # fmt: skip
        bj.spawns.perform_async("parent-a", 20)
        bj.spawns.perform_async("parent-b", 20)
    first, second = workers.start(**ENV), workers.start(**ENV)
    settle_quietly(r, 2)
    stop_all(first, second)
    assert runs_of(r, b.bid) == {"success": 1, "complete": 1}
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.pending) == (42, 0)
    assert_never_early(r)
    assert all(record["finished"] == 42 for record in callbacks(r))


def test_batches_nested_three_deep_complete_inside_out(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    def callbacks_for(label: str) -> dict[str, object]:
        return {"on_success": bj.on_success, "on_complete": bj.on_complete, "callback_args": (label,)}

    with cogworker.batch("outer", **callbacks_for("outer")) as outer:  # type: ignore[arg-type]
        bj.ok.perform_async("outer-1")
        with cogworker.batch("middle", **callbacks_for("middle")) as middle:  # type: ignore[arg-type]
            bj.ok.perform_async("middle-1")
            with cogworker.batch("inner", **callbacks_for("inner")) as inner:  # type: ignore[arg-type]
                cogworker.push_bulk(bj.flaky, [(f"inner-{i}",) for i in range(5)])
            bj.ok.perform_async("middle-2")
        bj.ok.perform_async("outer-2")
    first, second = workers.start(**ENV), workers.start(**ENV)
    settle_quietly(r, 6)
    stop_all(first, second)
    for made in (outer, middle, inner):
        assert runs_of(r, made.bid) == {"success": 1, "complete": 1}, made
    order = [(record["label"], record["kind"]) for record in callbacks(r)]
    # A parent's callbacks come after its child's: those are members of the parent.
    assert max(order.index(("inner", k)) for k in ("success", "complete")) < min(
        order.index(("middle", k)) for k in ("success", "complete")
    )
    assert max(order.index(("middle", k)) for k in ("success", "complete")) < min(
        order.index(("outer", k)) for k in ("success", "complete")
    )
    # Each parent's members: its own jobs, its child (one member) and the child's two callbacks.
    expected = {outer.bid: 5, middle.bid: 5, inner.bid: 5}
    for bid, total in expected.items():
        status = cogworker.batch_status(bid)
        assert status is not None and status.total == total and status.pending == 0, status
    assert inner.up == [middle.bid, outer.bid]
    assert_never_early(r, children={outer.bid: 1, middle.bid: 1})
