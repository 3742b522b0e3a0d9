"""Batches in the sharded layout when the process carrying a member's end across slots dies, on a real
3-master cluster with real workers (store/batch_ends.py): the worker SIGKILLed after the member's
partition ack and before its count in the home slot; an end written and never moved; a decision
whose callbacks were written and never pushed; a member SIGKILLed inside its own `jobs()` block; a
member that ends unrun; a lost reply at each write. Every callback runs exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis
import sharded_batch_jobs as sbj
from redis.crc import key_slot

import cogworker
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.store import batch_ends, batch_scripts, fanout, keys, outbox, shards
from cogworker.worker.settling.shard_route import unsettled
from tests.e2e.sharded import batch_support
from tests.e2e.sharded.batch_support import CALLBACKS, MEMBERS, all_ran, drained, lines, never_early, start
from tests.support.daemon_env import QUICK_RECOVERY, clean_env
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner
from tests.support.workers import WorkerPool

api = batch_support.api
layout = batch_support.layout
BOTH = {"success": 1, "complete": 1}


def status(bid: str) -> cogworker.BatchStatus:
    found = cogworker.batch_status(bid)
    assert found is not None
    return found


def home_master(redis_cluster: RedisCluster) -> int:
    return redis_cluster.owner(key_slot(b"home"))[0]


def queue_elsewhere(redis_cluster: RedisCluster) -> str:
    """A one-partition queue whose slot is on another master than the home slot's."""
    home = home_master(redis_cluster)
    return next(
        name
        for name in (f"solo{i}" for i in range(50))
        if redis_cluster.owner(key_slot(f"{name}#0".encode()))[0] != home
    )


def in_partition(cluster: redis.RedisCluster, p: shards.Partition, jid: str) -> str:
    """Take the queued member `jid` off partition `p`'s queue onto an in-progress list, as a fetch
    does; returns its payload."""
    for raw in cluster.lrange(shards.queue_key(p), 0, -1):
        if codec.loads(raw)["jid"] == jid:
            cluster.lrem(shards.queue_key(p), 1, raw)
            cluster.lpush(shards.in_progress(p, "gone-process"), raw)
            return str(raw)
    raise AssertionError(f"{jid} is not queued in {p}")


def partition_of(cluster: redis.RedisCluster, jid: str) -> shards.Partition:
    return next(
        p
        for p in MEMBERS
        if any(codec.loads(r)["jid"] == jid for r in cluster.lrange(shards.queue_key(p), 0, -1))
    )


def ack_unmoved(cluster: redis.RedisCluster, jid: str, age_s: float = 0.0) -> tuple[shards.Partition, str]:
    """The member's ack by the real script, its entry written and never moved (its mover died), its
    entry's time set `age_s` back (a sweep moves only entries older than the lease)."""
    p = partition_of(cluster, jid)
    raw = in_partition(cluster, p, jid)
    listed = shards.in_progress(p, "gone-process")
    own = [
        listed,
        shards.stat(p, "processed"),
        shards.stat_day(p, "processed", "d"),
        shards.orphanings(p, jid),
    ]
    clients = fanout.clients_of(cw_client.connection())
    job = codec.loads_dict(raw) or {}
    reply, entry_id = batch_ends.run_end(clients.of(p), "member_ack", p, own, [raw], job, "ok", "")
    assert reply == 1
    if age_s:
        body = codec.loads(cluster.hget(outbox.key(p), entry_id))
        body["at"] -= age_s
        cluster.hset(outbox.key(p), entry_id, codec.dumps(body))
    return p, entry_id


def test_the_worker_sigkilled_between_the_partition_ack_and_the_home_count_leaves_it_to_a_sweep(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """The home slot's master is stopped (SIGSTOP) once the member runs: its ack in its partition (on
    another master) writes the entry, the mover then blocks on the home master, and the worker is
    SIGKILLed there. The master is resumed; another worker's sweep counts the member and pushes the
    callbacks: once each."""
    solo = queue_elsewhere(redis_cluster)
    p = shards.Partition(solo)
    with cogworker.batch("killed-mover", **sbj.callbacks("killed-mover")) as b:
        sbj.blocks.set(queue=solo).perform_async("last")
    queues = f"bq,cbq,{solo}"
    doomed = start(workers, redis_cluster, out, COGWORKER_QUEUES=queues, COGWORKER_REDIS_TIMEOUT_S="30")
    wait_until(lambda: lines(out, "started"), timeout=30, message="the member runs")
    node = next(n for n in redis_cluster.nodes if n.port == home_master(redis_cluster))
    node.pause()
    try:
        out.with_suffix(".release").touch()
        wait_until(lambda: cluster.hlen(outbox.key(p)) == 1, timeout=2, interval=0.01, message="acked")
        doomed.signal(signal.SIGKILL)
        doomed.proc.wait(timeout=5)
    finally:
        node.resume()
    redis_cluster.wait_ok()
    assert cluster.llen(shards.queue_key(p)) == 0  # acknowledged in its partition, not requeued
    assert cluster.hlen(outbox.key(p)) == 1  # its mover died before the HDEL: the entry waits
    assert lines(out, "cb") == []
    start(workers, redis_cluster, out, COGWORKER_QUEUES=queues)
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster) and cluster.hlen(outbox.key(p)) == 0, timeout=30, message="drained")
    assert all_ran(out, b.bid, BOTH)
    done = status(b.bid)
    assert (done.total, done.pending, done.done, done.holds) == (1, 0, 1, 0)
    assert never_early(out)


def test_an_end_written_and_never_moved_is_counted_by_a_workers_sweep_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("unmoved", **sbj.callbacks("unmoved")) as b:
        jid = sbj.ok.perform_async("never-moved")
    assert jid is not None
    p, entry_id = ack_unmoved(cluster, jid, age_s=30)
    assert status(b.bid).pending == 1  # not counted until moved
    start(workers, redis_cluster, out)
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    assert cluster.hget(outbox.key(p), entry_id) is None
    assert all_ran(out, b.bid, BOTH) and lines(out, "ran") == []  # the member's run was the ack above


def test_a_decision_whose_callbacks_were_written_and_never_pushed_is_pushed_by_a_sweep_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """The mover died after the home apply (it decided: callback entries written) and before moving
    them or deleting the member's entry. The sweep applies the entry again (nothing changes) and
    pushes the callbacks once."""
    with cogworker.batch("decided", **sbj.callbacks("decided")) as b:
        jid = sbj.ok.perform_async("decides")
    assert jid is not None
    p, entry_id = ack_unmoved(cluster, jid, age_s=30)
    entry = outbox.decode(entry_id, cluster.hget(outbox.key(p), entry_id))
    layout_keys, layout_args = batch_scripts.layout(entry.fields["member"], "ok", "", 60)
    home = cw_client.connection()
    fired = batch_scripts.run(home, "batch_apply", [keys.OUTBOX, *layout_keys], layout_args)
    assert sorted(fired) == [f"cb:{b.bid}:complete", f"cb:{b.bid}:success"]
    again = batch_scripts.run(home, "batch_apply", [keys.OUTBOX, *layout_keys], layout_args)
    assert again == []  # applied twice: counted once, decided once
    assert status(b.bid).pending == 0 and cluster.hlen(keys.OUTBOX) == 2
    start(workers, redis_cluster, out)
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    assert all_ran(out, b.bid, BOTH)


def test_a_callback_push_repeated_after_a_lost_reply_makes_one_copy(
    api: None, cluster: redis.RedisCluster
) -> None:
    with cogworker.batch("lost-push", **sbj.callbacks("lost-push")) as b:
        jid = sbj.ok.perform_async("only")
    assert jid is not None
    p, entry_id = ack_unmoved(cluster, jid)
    mover = outbox.Mover(fanout.clients_of(cw_client.connection()), cw_client.settings())
    entry = outbox.decode(entry_id, cluster.hget(outbox.key(p), entry_id))
    batch_ends.apply_end(mover, entry)  # the apply, which moves the callbacks it wrote
    for kind in ("success", "complete"):
        cb_id = f"cb:{b.bid}:{kind}"
        assert cluster.hget(keys.OUTBOX, cb_id) is None  # moved by the apply
    # The push ran and its reply was lost: the entry stayed and is moved again (as a sweep would).
    cb = f"cb:{b.bid}:complete"
    target = shards.Partition("cbq", int(cluster.hget(keys.batch(b.bid), "cbp:complete") or 0))
    payload = next(codec.loads(r) for r in cluster.lrange(shards.queue_key(target), 0, -1) if "complete" in r)
    payload.pop("enqueued_at", None)
    cluster.hset(keys.OUTBOX, cb, outbox.encode("batch_cb", [(target, codec.dumps(payload))]))
    assert mover.move_ids(None, [cb]) == 1
    copies = [r for q in CALLBACKS for r in cluster.lrange(shards.queue_key(q), 0, -1) if payload["jid"] in r]
    assert len(copies) == 1
    assert mover.move_ids(p, [entry_id]) == 1 and mover.move_ids(p, [entry_id]) == 0
    assert status(b.bid).done == 1


def test_a_dead_filing_sent_again_after_a_lost_reply_counts_once(
    api: None, cluster: redis.RedisCluster
) -> None:
    with cogworker.batch("lost-filing", **sbj.callbacks("lost-filing")) as b:
        jid = sbj.dies.perform_async("x")
    assert jid is not None
    p = partition_of(cluster, jid)
    raw = in_partition(cluster, p, jid)
    listed = shards.in_progress(p, "gone-process")
    job = codec.loads_dict(raw) or {}
    job |= {"error_class": "RuntimeError", "error_message": "x dies"}
    text = codec.dumps(job)
    script_keys = [listed, shards.dead(p), shards.stat(p, "failed"), shards.stat_day(p, "failed", "d"),
                   shards.orphanings(p, jid), shards.deaths(p)]  # fmt: skip
    args = [raw, 1.0, text, "1", 100, 0, "", "notice", 100]
    client = fanout.clients_of(cw_client.connection()).of(p)
    first, entry_id = batch_ends.run_end(
        client, "settle", p, script_keys, args, job, "dead", "RuntimeError: x"
    )
    again, same = batch_ends.run_end(client, "settle", p, script_keys, args, job, "dead", "RuntimeError: x")
    assert (first, again, same) == (1, 2, entry_id)  # 2: already filed, nothing written again
    assert cluster.hlen(outbox.key(p)) == 1 and cluster.zcard(shards.dead(p)) == 1
    mover = outbox.Mover(fanout.clients_of(cw_client.connection()), cw_client.settings())
    assert mover.move_ids(p, [entry_id]) == 1
    done = status(b.bid)
    assert (done.total, done.pending, done.dead, done.failed) == (1, 0, 1, 1)
    pushed = sorted(
        codec.loads(r)["bcb"][1] for q in CALLBACKS for r in cluster.lrange(shards.queue_key(q), 0, -1)
    )
    assert pushed == ["complete", "death"]


def test_a_member_sigkilled_inside_its_block_lets_the_batch_complete_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("killed-in-block", **sbj.callbacks("killed-in-block")) as b:
        sbj.adds_then_blocks.perform_async("adder")
    doomed = start(workers, redis_cluster, out, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: lines(out, "started"), timeout=30, message="the member inside its block")
    assert status(b.bid).holds == 1  # its run's hold
    doomed.signal(signal.SIGKILL)
    doomed.proc.wait(timeout=10)
    start(workers, redis_cluster, out, **QUICK_RECOVERY)
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=90, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    done = status(b.bid)
    # The adder (run twice, counted once) and the member each of its runs added.
    assert (done.total, done.pending, done.done, done.holds) == (3, 0, 3, 0)
    assert all_ran(out, b.bid, BOTH) and never_early(out)


def test_a_member_that_ends_unrun_counts_failed_and_fires_on_complete_only(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("unrun", **sbj.callbacks("unrun")) as b:
        sbj.ok.set(expires_in=0.01).perform_async("expired")
        sbj.ok.perform_async("fine")
    wait_until(lambda: cogworker.batch_status(b.bid) is not None, timeout=1)
    start(workers, redis_cluster, out)
    wait_until(lambda: all_ran(out, b.bid, {"complete": 1}), timeout=60, message="on_complete ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    done = status(b.bid)
    assert (done.total, done.pending, done.failed, done.dead) == (2, 0, 1, 0)
    assert [tag for tag, _pid in lines(out, "ran")] == ["fine"]
    assert all_ran(out, b.bid, {"complete": 1})


def test_a_handed_over_dead_filing_of_a_member_counts_it_dead_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """A stopping process handed a member's dead filing over (its partition's `unsettled` list); a
    worker's poller files it (file_unsettled.lua), its death written to the partition's outbox in the
    same script and counted in the batch."""
    with cogworker.batch("handed-over", **sbj.callbacks("handed-over")) as b:
        jid = sbj.dies.perform_async("handed")
        sbj.ok.perform_async("beside")
    assert jid is not None
    p = partition_of(cluster, jid)
    raw = next(r for r in cluster.lrange(shards.queue_key(p), 0, -1) if codec.loads(r)["jid"] == jid)
    cluster.lrem(shards.queue_key(p), 1, raw)  # as handover.lua takes it off its list
    job = codec.loads_dict(raw) or {}
    job |= {"error_class": "RuntimeError", "error_message": "handed dies"}
    record = codec.dumps({"set": shards.dead(p), "score": 1.0, "payload": job})
    cluster.lpush(unsettled(p), record)
    start(workers, redis_cluster, out, COGWORKER_POLL_INTERVAL_S="0.2")
    wait_until(lambda: all_ran(out, b.bid, {"death": 1, "complete": 1}), timeout=60, message="callbacks")
    wait_until(lambda: drained(cluster) and cluster.llen(unsettled(p)) == 0, timeout=30, message="drained")
    done = status(b.bid)
    assert (done.total, done.pending, done.dead) == (2, 0, 1)
    assert "RuntimeError: handed dies" in done.failures[jid]
    assert all_ran(out, b.bid, {"death": 1, "complete": 1})


@pytest.mark.timeout(150)
def test_a_poison_pill_member_buried_by_recovery_counts_dead_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, swarms: SwarmRunner, out: Path
) -> None:
    """A member that SIGKILLs its process every run is buried by recovery (requeue.lua files it raw,
    swap_dead.lua swaps in its entry): the swap writes its death to the partition's outbox."""
    with cogworker.batch("pill", **sbj.callbacks("pill")) as b:
        sbj.kills_itself.perform_async("pill")
        sbj.ok.perform_async("innocent")
    env = batch_support.worker_env(
        redis_cluster, out, **QUICK_RECOVERY, COGWORKER_MAX_ORPHANINGS="1", COGWORKER_POLL_INTERVAL_S="0.2"
    )
    env.pop("COGWORKER_REDIS_URL")
    swarm = swarms.start(**env)
    wait_until(lambda: all_ran(out, b.bid, {"death": 1, "complete": 1}), timeout=120, message="callbacks")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    done = status(b.bid)
    assert (done.total, done.pending, done.dead) == (2, 0, 1)
    assert any("ProcessDied" in error for error in done.failures.values()), done.failures
    assert all_ran(out, b.bid, {"death": 1, "complete": 1})
    assert swarm.stop() == 0


def test_an_app_sigkilled_inside_its_block_has_its_lease_lapse_and_the_batch_complete_once(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """The app's block holds the batch by a lease; the app is SIGKILLed inside it. A worker's poller
    releases the lapsed lease (batch_close_outbox.lua), which decides once the member ended: the
    callbacks go through the home outbox, once."""
    env = batch_support.worker_env(redis_cluster, out, COGWORKER_BATCH_HOLD_LEASE_S="2")
    code = """
        import os, signal, cogworker, sharded_batch_jobs as sbj
        with cogworker.batch("app-killed", **sbj.callbacks("app-killed")) as b:
            sbj.ok.perform_async("m")
            print(b.bid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    bid = done.stdout.strip()
    start(workers, redis_cluster, out, COGWORKER_BATCH_HOLD_LEASE_S="2", COGWORKER_POLL_INTERVAL_S="0.2")
    wait_until(lambda: all_ran(out, bid, BOTH), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    assert [tag for tag, _pid in lines(out, "ran")] == ["m"]
    assert all_ran(out, bid, BOTH) and never_early(out)
