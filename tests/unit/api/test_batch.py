"""Batches in-process against the session's real Redis (api/batch.py, store/batch_scripts.py,
worker/settling/batch_settle.py): members acknowledged and filed through a real Settler, as a worker does.
Nothing is decided while the block is open, a member counts once however often it is acknowledged,
dead and unrun members count as failures, and each callback is pushed exactly once."""

from __future__ import annotations

import json
from typing import Any

import batch_jobs as bj
import pytest
import redis

import cogworker
from cogworker import codec
from cogworker.api import batch as batch_api
from cogworker.api import retry
from cogworker.settings import Settings
from cogworker.store import key_guard, keys
from cogworker.worker.settling.settle import Settler, file_unsettled, handover_record
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "batch-unit:1:x"
CALLBACKS = {"on_success": bj.on_success, "on_complete": bj.on_complete, "on_death": bj.on_death}


@pytest.fixture
def settler(configured: Settings) -> Settler:
    return Settler(components.build(configured).ctx, keys.in_progress(ME))


def fetch_all(r: redis.Redis, queue: str = "default") -> list[tuple[str, dict[str, Any]]]:
    """Move every job of `queue` onto our in-progress list, as a fetch does."""
    fetched = []
    while (raw := r.lmove(keys.queue(queue), keys.in_progress(ME), "RIGHT", "LEFT")) is not None:
        fetched.append((raw, json.loads(raw)))
    return fetched


def callback_kinds(r: redis.Redis) -> list[str]:
    return sorted(json.loads(raw)["bcb"][1] for raw in r.lrange(keys.queue("callbacks"), 0, -1))


def test_nothing_is_decided_until_the_block_closes(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("open", **CALLBACKS, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
        for raw, job in fetch_all(r):
            settler.ack_member(raw, job)
        assert callback_kinds(r) == []
        assert cogworker.batch_status(b.bid).state == "open"  # type: ignore[union-attr]
    assert callback_kinds(r) == ["complete", "success"]
    status = cogworker.batch_status(b.bid)
    assert status is not None and status.complete and status.state == "complete"
    assert 0 < (status.ttl_s or 0) <= 30 * 24 * 3600


def test_a_member_acknowledged_twice_counts_once(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("twice", **CALLBACKS, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
        bj.ok.perform_async("b")
    (raw_a, job_a), (raw_b, job_b) = fetch_all(r)
    settler.ack_member(raw_a, job_a)
    r.lpush(keys.in_progress(ME), raw_a)  # run again after a crash: fetched and acknowledged again
    settler.ack_member(raw_a, job_a)
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.done, status.pending) == (1, 1)
    assert callback_kinds(r) == []
    settler.ack_member(raw_b, job_b)
    settler.ack_member(raw_b, job_b)  # no longer in progress: nothing happens
    assert callback_kinds(r) == ["complete", "success"]
    assert r.get(keys.STAT_PROCESSED) == "3"


def test_a_dead_member_fires_on_death_and_is_listed_with_its_error(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("dead", **CALLBACKS, callback_args={"label": "kw"}) as b:
        bj.dies.perform_async("a")
        bj.ok.perform_async("b")
    (raw_a, job_a), (raw_b, job_b) = fetch_all(r)
    assert settler.file(raw_a, retry.on_failure(job_a, RuntimeError("boom")))
    assert [json.loads(raw)["kwargs"] for raw in r.lrange(keys.queue("default"), 0, -1)] == [{"label": "kw"}]
    settler.ack_member(raw_b, job_b)
    assert callback_kinds(r) == ["complete"]
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.failed, status.dead) == (1, 1)
    assert status.failures == {job_a["jid"]: "RuntimeError: boom"}
    assert r.zcard(keys.DEAD) == 1 and r.llen(keys.DEATHS) == 1
    # The death callback (queue default) ends: its state is recorded in the batch.
    (raw_cb, job_cb), *_ = fetch_all(r)
    settler.ack_member(raw_cb, job_cb)
    assert {c.kind: c.state for c in cogworker.batch_status(b.bid).callbacks}["death"] == "done"  # type: ignore[union-attr]


def test_a_retried_member_counts_only_when_it_ends(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("retried", **CALLBACKS, callback_args=("x",)) as b:
        bj.flaky.perform_async("a")
    ((raw, job),) = fetch_all(r)
    assert settler.file(raw, retry.on_failure(job, ValueError("first")))
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.pending, status.failed) == (1, 0)
    retried = r.zrange(keys.RETRY, 0, -1)[0]
    r.lpush(keys.in_progress(ME), retried)
    settler.ack_member(retried, json.loads(retried))
    assert callback_kinds(r) == ["complete", "success"]


def test_a_member_ended_unrun_counts_as_failed(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("unrun", **CALLBACKS, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
    ((raw, job),) = fetch_all(r)
    settler.end_unrun(raw, job, "cancelled")
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.failed, status.dead) == (1, 0)
    assert status.failures == {job["jid"]: "ended without running (cancelled)"}
    assert callback_kinds(r) == ["complete"]


def test_a_dead_member_handed_over_is_counted_where_it_is_filed(
    r: redis.Redis, settler: Settler, configured: Settings
) -> None:
    with cogworker.batch("handed", **CALLBACKS, callback_args=("x",)) as b:
        bj.dies.perform_async("a")
    ((raw, job),) = fetch_all(r)
    filing = retry.on_failure(job, RuntimeError("late"))
    r.rpush(keys.UNSETTLED, handover_record(*retry.encoded(filing, raw)))
    parts = components.build(configured)
    assert file_unsettled(parts.client, parts.scripts, configured, parts.locks) == 1
    assert cogworker.batch_status(b.bid).dead == 1  # type: ignore[union-attr]
    assert callback_kinds(r) == ["complete"]


def test_a_poison_pill_member_is_counted_dead_when_recovery_buries_it(
    r: redis.Redis, settler: Settler, configured: Settings
) -> None:
    with cogworker.batch("pill", **CALLBACKS, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
    ((raw, job),) = fetch_all(r)
    r.lrem(keys.in_progress(ME), 1, raw)
    r.zadd(keys.DEAD, {raw: 1.0})  # filed raw by requeue.lua; the swap completes its burial
    components.build(configured).recovery.complete_burials([raw])
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.dead, status.pending) == (1, 0)
    assert status.failures[job["jid"]].startswith("cogworker.ProcessDied: its process died")
    assert callback_kinds(r) == ["complete"]
    assert json.loads(r.lrange(keys.queue("default"), 0, -1)[0])["bcb"] == [b.bid, "death"]


def test_an_ack_redis_refuses_is_kept_and_sent_later(r: redis.Redis, settler: Settler) -> None:
    with cogworker.batch("kept", **CALLBACKS, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
    ((raw, job),) = fetch_all(r)
    r.rename(keys.batch_pending(b.bid), keys.batch_pending(b.bid) + "-aside")
    r.set(keys.batch_pending(b.bid), "a string")  # the wrong type: the script refuses, nothing changes
    settler.ack_member(raw, job)
    assert settler.holding() == [raw]
    assert r.llen(keys.in_progress(ME)) == 1
    r.delete(keys.batch_pending(b.bid))
    r.rename(keys.batch_pending(b.bid) + "-aside", keys.batch_pending(b.bid))
    settler.retry_pending()
    assert settler.holding() == []
    assert callback_kinds(r) == ["complete", "success"]


def test_an_empty_batch_completes_when_its_block_closes(r: redis.Redis, configured: Settings) -> None:
    with cogworker.batch("empty", on_complete=bj.on_complete, callback_args=("x",)) as b:
        pass
    assert callback_kinds(r) == ["complete"]
    with pytest.raises(cogworker.BatchClosed):
        b.add(bj.ok, "late")
    assert r.llen(keys.queue("default")) == 0


def test_a_push_that_fails_leaves_the_batch(r: redis.Redis, configured: Settings) -> None:
    r.set(keys.queue("default"), "not a list")
    with cogworker.batch("failing") as b:
        with pytest.raises(key_guard.WrongTypeKey):
            bj.ok.perform_async("a")
        with pytest.raises(key_guard.WrongTypeKey):
            cogworker.push_bulk(bj.ok, [("b",), ("c",)])
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.pending, status.complete) == (0, 0, True)


def test_a_child_of_a_complete_batch_is_refused(r: redis.Redis, configured: Settings) -> None:
    with cogworker.batch("done") as parent:
        pass
    with pytest.raises(cogworker.BatchClosed), parent.jobs():
        pass
    gone = batch_api.Batch("f" * 24)
    with pytest.raises(cogworker.BatchClosed):
        batch_api.create("orphan", parent=gone)


def test_create_batch_and_the_small_api(r: redis.Redis, configured: Settings) -> None:
    bid = cogworker.create_batch([(bj.ok, ("a",)), (bj.ok, ("b",))], "made", on_complete=bj.on_complete)
    status = cogworker.batch_status(bid)
    assert status is not None and (status.total, status.description) == (2, "made")
    assert [json.loads(raw)["bid"] for raw in r.lrange(keys.queue("default"), 0, -1)] == [bid, bid]
    assert cogworker.current_batch() is None
    assert cogworker.batch_status("0" * 24) is None
    assert repr(cogworker.Batch(bid)) == f"<batch {bid}>"
    assert cogworker.Batch(bid).status().total == 2
    with pytest.raises(TypeError, match="bid must be a str"):
        cogworker.batch_status(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_complete takes a job"), cogworker.batch(on_complete=print):  # type: ignore[arg-type]
        pass
    with pytest.raises(TypeError, match="description must be a str"), cogworker.batch(7):  # type: ignore[arg-type]
        pass
    with batch_api.as_member({"bid": bid, "bup": [], "bq": ["callbacks"]}):
        current = cogworker.current_batch()
        assert current is not None and (current.bid, current.queues) == (bid, ["callbacks"])


def test_the_callback_payload_is_a_job(r: redis.Redis, configured: Settings) -> None:
    with cogworker.batch(
        on_complete=bj.on_complete.set(queue="callbacks", retry=2), callback_args=("y",)
    ) as b:
        pass
    (raw,) = r.lrange(keys.queue("callbacks"), 0, -1)
    job = codec.loads_dict(raw)
    assert job is not None
    assert (job["class"], job["args"], job["retry"], job["bcb"]) == (
        "batch_jobs.on_complete",
        [b.bid, "y"],
        2,
        [b.bid, "complete"],
    )
    assert isinstance(job["enqueued_at"], float)


def test_under_a_testing_mode_a_batch_only_runs_its_block(r: redis.Redis, configured: Settings) -> None:
    from cogworker import testing

    with testing.fake():
        with cogworker.batch("fake", on_complete=bj.on_complete, callback_args=("x",)) as b:
            bj.ok.perform_async("a")
        with b.jobs():
            bj.ok.perform_async("b")
        assert [job["args"] for job in bj.ok.jobs] == [["a"], ["b"]]
        assert "bid" not in bj.ok.jobs[0]
    assert cogworker.batch_status(b.bid) is None
    assert r.keys("*") == []


def test_add_and_close_and_a_wrong_type_batch_key(r: redis.Redis, configured: Settings) -> None:
    held = batch_api.create("by hand", on_complete=bj.on_complete, callback_args=("x",))
    jid = held.add(bj.ok, "a")
    assert cogworker.batch_status(held.bid).pending == 1  # type: ignore[union-attr]
    r.delete(keys.queue("default"))
    r.srem(keys.batch_pending(held.bid), jid)  # as if it ended
    assert callback_kinds(r) == []
    batch_api.close(held)  # the hold `create` took: now it completes
    assert callback_kinds(r) == ["complete"]
    r.set(keys.BATCHES, "not a zset")
    with pytest.raises(key_guard.WrongTypeKey), cogworker.batch("refused"):
        pass
    r.delete(keys.BATCHES)
    made = batch_api.create("close refused")
    r.delete(keys.batch_failures(made.bid))
    r.set(keys.batch_failures(made.bid), "a string")
    with pytest.raises(key_guard.WrongTypeKey):
        batch_api.close(made)


@pytest.fixture
def durable_redis() -> Any:
    server = RedisServer(persistent=True)  # keeps its data across the stop and start below
    try:
        yield server
    finally:
        server.close()


def test_acks_kept_through_an_outage_are_sent_when_redis_is_back(durable_redis: Any) -> None:
    from cogworker.api import client
    from cogworker.settings import load_settings

    private_redis = durable_redis
    settings = load_settings(redis_url=private_redis.url)
    client.configure(settings)
    r = private_redis.client()
    with cogworker.batch("outage", on_complete=bj.on_complete, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
    ((raw, job),) = fetch_all(r)
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    private_redis.stop()
    settler.ack_member(raw, job)
    settler.retry_pending()  # still down: kept
    assert settler.holding() == [raw]
    private_redis.start()
    settler.retry_pending()
    assert settler.holding() == []
    assert cogworker.batch_status(b.bid).complete  # type: ignore[union-attr]
