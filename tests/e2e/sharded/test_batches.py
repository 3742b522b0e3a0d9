"""Batches in the sharded layout on a real 3-master cluster (store/batch_ends.py): members spread over
partitions on three masters, acknowledged in their partitions' slots with their ends written to those
slots' outboxes, counted in the batch in the home slot, and the callbacks pushed through the home
outbox. Every callback runs exactly once, and never before every member ended."""

from __future__ import annotations

from pathlib import Path

import redis
import sharded_batch_jobs as sbj

import cogworker
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.store import batch_ends, fanout, keys, outbox, shards
from tests.e2e.sharded import batch_support
from tests.e2e.sharded.batch_support import (
    MEMBERS,
    PARTITIONS,
    all_ran,
    callbacks,
    drained,
    lines,
    never_early,
    outboxes_empty,
    ran,
    start,
    worker_env,
)
from tests.e2e.sharded.pushing import every_key, master_of
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = batch_support.api
layout = batch_support.layout


def status(bid: str) -> cogworker.BatchStatus:
    found = cogworker.batch_status(bid)
    assert found is not None
    return found


def test_a_first_call_in_a_fresh_interpreter_makes_a_batch_whose_callbacks_run_once_after_every_member(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    env = worker_env(redis_cluster, out)
    url = env.pop("COGWORKER_REDIS_URL")
    bid = first_call(
        """
        import cogworker, sharded_batch_jobs as sbj
        with cogworker.batch("first", **sbj.callbacks("first")) as b:
            for n in range(30):
                sbj.ok.perform_async(f"m{n}")
        print(b.bid)
        """,
        url,
        **env,
    )
    # Spread over the four partitions, on the three masters.
    assert all(cluster.llen(shards.queue_key(p)) > 0 for p in MEMBERS)
    assert len({master_of(redis_cluster, p) for p in MEMBERS}) == 3
    start(workers, redis_cluster, out)
    start(workers, redis_cluster, out)
    both = {"success": 1, "complete": 1}
    wait_until(lambda: all_ran(out, bid, both), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="every outbox entry moved, queues empty")
    assert ran(out) == {f"m{n}": 1 for n in range(30)}
    assert callbacks(out, bid) == {"success": 1, "complete": 1}
    assert never_early(out)


def test_a_retried_member_counts_once_and_a_dead_member_fires_on_death_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("retried", **sbj.callbacks("retried")) as retried:
        sbj.flaky.perform_async("flaky-1")
        sbj.ok.perform_async("plain-1")
    with cogworker.batch("dying", **sbj.callbacks("dying")) as dying:
        sbj.dies.perform_async("dead-1")
        sbj.dies.perform_async("dead-2")
        for n in range(4):
            sbj.ok.perform_async(f"alive-{n}")
    start(workers, redis_cluster, out)
    both, dead = {"success": 1, "complete": 1}, {"death": 1, "complete": 1}
    wait_until(lambda: all_ran(out, retried.bid, both), timeout=60, message="retried done")
    wait_until(lambda: all_ran(out, dying.bid, dead), timeout=60, message="dying done")
    wait_until(lambda: drained(cluster), timeout=30, message="every outbox entry moved, queues empty")
    assert callbacks(out, retried.bid) == {"success": 1, "complete": 1}
    # Each callback's own end (its ack in its partition, `bcb`) recorded in its batch's hash.
    wait_until(
        lambda: (
            {c.kind: c.state for c in status(retried.bid).callbacks}
            == {"success": "done", "complete": "done", "death": "waiting"}
        ),
        timeout=30,
        message="the callbacks' ends recorded",
    )
    first = status(retried.bid)
    assert (first.total, first.pending, first.done, first.failed) == (2, 0, 2, 0)
    # Two dead members: on_death once, on_complete once, no on_success.
    assert callbacks(out, dying.bid) == {"death": 1, "complete": 1}
    second = status(dying.bid)
    assert (second.total, second.pending, second.done, second.failed, second.dead) == (6, 0, 6, 2, 2)
    assert sorted(second.failures) and all("RuntimeError" in e for e in second.failures.values())
    assert never_early(out)
    # Each dead member is in its own partition's dead set, nothing in the home slot's.
    dead = sum(cluster.zcard(shards.dead(p)) for p in MEMBERS)
    assert dead == 2 and cluster.zcard(keys.DEAD) == 0


def test_nested_batches_complete_after_their_children_and_callbacks(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("outer", **sbj.callbacks("outer")) as outer:
        sbj.ok.perform_async("outer-1")
        with cogworker.batch("middle", **sbj.callbacks("middle")) as middle:
            sbj.ok.perform_async("middle-1")
            with cogworker.batch("inner", **sbj.callbacks("inner")) as inner:
                sbj.ok.perform_async("inner-1")
                sbj.dies.perform_async("inner-dead")
    start(workers, redis_cluster, out)
    dead = {"death": 1, "complete": 1}
    wait_until(lambda: all_ran(out, outer.bid, dead), timeout=60, message="outer done")
    wait_until(lambda: drained(cluster), timeout=30, message="every outbox entry moved, queues empty")
    assert callbacks(out, inner.bid) == {"death": 1, "complete": 1}
    # A child with a dead member counts as a dead member of its parent, level by level.
    assert callbacks(out, middle.bid) == {"death": 1, "complete": 1}
    assert callbacks(out, outer.bid) == {"death": 1, "complete": 1}
    order = [(kind, bid) for kind, _label, bid, *_ in lines(out, "cb")]
    assert order.index(("complete", inner.bid)) < order.index(("complete", middle.bid))
    assert order.index(("complete", middle.bid)) < order.index(("complete", outer.bid))
    # The parent counted its child batch and the child's callbacks as members.
    assert status(outer.bid).total == 1 + 1 + 2  # its member, the middle batch, middle's two callbacks
    assert never_early(out)


def test_three_workers_ending_the_last_members_together_fire_each_callback_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    bids = []
    for round_ in range(5):
        with cogworker.batch(f"race-{round_}", **sbj.callbacks(f"race-{round_}")) as b:
            for n in range(3):
                sbj.blocks.perform_async(f"r{round_}-{n}")
        bids.append(b.bid)
    for _ in range(3):
        start(workers, redis_cluster, out, COGWORKER_CONCURRENCY="5")
    wait_until(lambda: len(lines(out, "started")) == 15, timeout=60, message="every member started")
    out.with_suffix(".release").touch()  # all end at once, on three workers
    both = {"success": 1, "complete": 1}
    wait_until(lambda: all(all_ran(out, bid, both) for bid in bids), timeout=60, message="callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="every outbox entry moved, queues empty")
    assert {bid: callbacks(out, bid) for bid in bids} == {bid: {"success": 1, "complete": 1} for bid in bids}
    assert len({pid for _tag, pid in lines(out, "ran")}) == 3  # on three workers
    assert never_early(out)


def test_an_ack_sent_again_after_a_lost_reply_counts_once_and_moves_the_entry_it_wrote(
    api: None, cluster: redis.RedisCluster
) -> None:
    """The member's partition ack whose reply was lost (it ran, wrote its entry) is sent again: the
    resend finds the job gone, writes nothing, and the entry the first call wrote is moved once."""
    with cogworker.batch("lost-ack", **sbj.callbacks("lost-ack")) as b:
        jid = sbj.ok.perform_async("only")
    assert jid is not None
    p = next(p for p in MEMBERS if cluster.llen(shards.queue_key(p)))
    raw = cluster.rpop(shards.queue_key(p))
    listed = shards.in_progress(p, "test-process")
    cluster.lpush(listed, raw)
    job = codec.loads_dict(raw) or {}
    own = [
        listed,
        shards.stat(p, "processed"),
        shards.stat_day(p, "processed", "d"),
        shards.orphanings(p, jid),
    ]
    clients = fanout.clients_of(cw_client.connection())
    first, entry_id = batch_ends.run_end(clients.of(p), "member_ack", p, own, [raw], job, "ok", "")
    again, same_id = batch_ends.run_end(clients.of(p), "member_ack", p, own, [raw], job, "ok", "")
    assert (first, again, same_id) == (1, 0, entry_id)
    assert cluster.hlen(outbox.key(p)) == 1
    assert int(cluster.get(shards.stat(p, "processed")) or 0) == 1  # counted processed once
    settings = cw_client.settings()
    mover = outbox.Mover(clients, settings)
    # The move (apply, callbacks' push, HDEL) repeated after a lost reply at each step: once.
    entry = outbox.decode(entry_id, cluster.hget(outbox.key(p), entry_id))
    batch_ends.apply_end(mover, entry)  # the apply ran, its reply lost: run again by the next move
    assert mover.move_ids(p, [entry_id]) == 1
    assert mover.move_ids(p, [entry_id]) == 0  # gone: moved
    done = status(b.bid)
    assert (done.total, done.pending, done.done) == (1, 0, 1)
    pushed = [
        codec.loads(x) for q in batch_support.CALLBACKS for x in cluster.lrange(shards.queue_key(q), 0, -1)
    ]
    assert sorted(j["bcb"][1] for j in pushed) == ["complete", "success"]
    assert outboxes_empty(cluster)


def test_the_layout_keeps_batch_state_in_the_home_slot(api: None, cluster: redis.RedisCluster) -> None:
    with cogworker.batch("home", **sbj.callbacks("home")) as b:
        sbj.ok.perform_async("h")
    assert cluster.exists(keys.batch(b.bid)) and cluster.scard(keys.batch_pending(b.bid)) == 1
    fields = cluster.hgetall(keys.batch(b.bid))
    # Each callback's partition chosen at creation, by its pre-assigned jid.
    assert {fields[f"cbp:{kind}"] for kind in ("success", "complete", "death")} <= {"0", "1"}
    assert PARTITIONS


def test_a_deployment_touches_only_its_own_prefixs_batch_keys_and_outboxes(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """Another deployment's outboxes on the same cluster (prefix `cw2:`), with entries old enough to be
    swept, are left alone; every key this deployment's batch wrote is under its prefix, in the home
    slot or one of its queues' partitions."""
    stale = outbox.encode(batch_ends.END, member={"bid": "other", "jid": "j"}, outcome="ok", error="")
    body = codec.loads(stale)
    body["at"] -= 60
    foreign = {"cw2:{home}:outbox": "cb:other:complete", "cw2:{bq#0}:outbox": "batch:other:j:ok"}
    for key, entry_id in foreign.items():
        cluster.hset(key, entry_id, codec.dumps(body))
    with cogworker.batch("mine", **sbj.callbacks("mine")) as b:
        for n in range(6):
            sbj.ok.perform_async(f"p{n}")
    start(workers, redis_cluster, out, COGWORKER_POLL_INTERVAL_S="0.2")
    wait_until(lambda: all_ran(out, b.bid, {"success": 1, "complete": 1}), timeout=60, message="callbacks")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    for key, entry_id in foreign.items():
        assert cluster.hget(key, entry_id) == codec.dumps(body)  # untouched by this deployment
    mine = [k for k in every_key(redis_cluster) if not k.startswith("cw2:")]
    allowed = ("cw:{home}:", *(p.prefix for p in (*MEMBERS, *batch_support.CALLBACKS)))
    assert mine and [k for k in mine if not k.startswith(allowed)] == []
    assert all(p.prefix.startswith("cw:{") for p in MEMBERS)
