"""A batch member's run taken off a dead process's in-progress list in the sharded layout, on a real
3-master cluster with real workers: requeue.lua in the member's partition writes a `batch_hold` entry
with the requeue, whose apply releases the run's hold on its batch in the home slot
(store/batch_ends.py `apply_hold`), and a member cancelled while its process died ends unrun,
counted failed through its partition's outbox.

The hold's release is observed while the requeued copy waits in a paused queue: only the requeue
can have released it then (the copy's own end releases it too)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis
import sharded_batch_jobs as sbj

import cogworker
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.ops import queues
from cogworker.store import fanout, job_keys, keys, outbox, shards
from cogworker.store.scripts import Scripts
from tests.e2e.sharded import batch_support
from tests.e2e.sharded.batch_support import MEMBERS, all_ran, drained, lines, never_early, start
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = batch_support.api
BOTH = {"success": 1, "complete": 1}
GONE = "gone-process"


def status(bid: str) -> cogworker.BatchStatus:
    found = cogworker.batch_status(bid)
    assert found is not None
    return found


def queued(cluster: redis.RedisCluster) -> int:
    return sum(int(cluster.llen(shards.queue_key(p))) for p in MEMBERS)


def taken_with_its_hold(cluster: redis.RedisCluster, bid: str, jid: str) -> tuple[shards.Partition, str]:
    """Take the queued member `jid` onto GONE's in-progress list, as a fetch does, and its run's hold
    on its batch, as its `jobs()` block does (the value: that list). Returns its partition and payload."""
    for p in MEMBERS:
        for raw in cluster.lrange(shards.queue_key(p), 0, -1):
            if codec.loads(raw)["jid"] == jid:
                cluster.lrem(shards.queue_key(p), 1, raw)
                cluster.lpush(shards.in_progress(p, GONE), raw)
                cluster.hset(keys.batch(bid), f"hold:run:{jid}", shards.in_progress(p, GONE))
                cluster.hincrby(keys.batch(bid), "holds", 1)
                return p, str(raw)
    raise AssertionError(f"{jid} is not queued")


def requeue_unmoved(p: shards.Partition, raw: str) -> list[object]:
    """requeue.lua on GONE's list in `p`, as sharded recovery runs it (known dead), its `batch_hold`
    entry never moved (the recovering process died after the script)."""
    declared = job_keys.Declared()
    declared.add_jobs([raw], p.queue)
    job_list, job_args = declared.keys_and_args(p)
    batch_list, batch_args = declared.batch_keys_and_args(p)
    member_list, member_args = declared.member_keys_and_args(p, 3600)
    client = fanout.clients_of(cw_client.connection()).of(p)
    fixed = [
        shards.in_progress(p, GONE),
        *(job_keys.stand_in(p, kind, name) for kind, name in (("process", GONE), ("last-beat", "all"))),
        shards.dead(p),
        shards.registry(p),
        *(job_keys.stand_in(p, kind, "all") for kind in ("live-queues", "cancels")),
    ]
    args = [p.queue, GONE, "", "1", 3600, 3, 2, 3600, int(time.time()), 2, ""]
    reply: list[object] = Scripts(client).run(
        "requeue",
        [*fixed, *job_list, *batch_list, *member_list],
        [*args, *job_args, *batch_args, *member_args],
        client=client,
    )
    return reply


def test_a_member_sigkilled_inside_its_block_has_its_hold_released_by_the_requeue(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("hold-requeued", **sbj.callbacks("hold-requeued")) as b:
        sbj.adds_then_blocks.perform_async("adder")
    doomed = start(workers, redis_cluster, out, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: lines(out, "started"), timeout=30, message="the member inside its block")
    assert status(b.bid).holds == 1  # its run's hold
    home = cw_client.connection()
    queues.pause(home, "bq")  # the requeued copy waits: its own end can't release the hold
    doomed.signal(signal.SIGKILL)
    doomed.proc.wait(timeout=10)
    start(workers, redis_cluster, out, **QUICK_RECOVERY)
    wait_until(lambda: status(b.bid).holds == 0, timeout=60, message="the hold released by the requeue")
    held = status(b.bid)
    assert held.held_by == {} and held.pending == 2 and held.completed_at is None
    assert queued(cluster) == 2  # the adder's copy and the member its run added, both waiting
    # What a user sees, asking from a fresh interpreter configured by the deployment's env vars.
    env = batch_support.worker_env(redis_cluster, out)
    code = (
        f"import cogworker; s = cogworker.batch_status({b.bid!r}); print(s.holds, len(s.held_by), s.pending)"
    )
    assert first_call(code, env.pop("COGWORKER_REDIS_URL"), **env) == "0 0 2"
    assert outbox_empty(cluster)
    queues.resume(home, "bq")
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=90, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    done = status(b.bid)
    assert (done.total, done.pending, done.done, done.holds) == (3, 0, 3, 0)
    assert all_ran(out, b.bid, BOTH) and never_early(out)


def outbox_empty(cluster: redis.RedisCluster) -> bool:
    return all(cluster.hlen(outbox.key(p)) == 0 for p in MEMBERS)


def test_a_hold_release_written_and_never_moved_is_applied_by_a_workers_sweep(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    with cogworker.batch("hold-unmoved", **sbj.callbacks("hold-unmoved")) as b:
        jid = sbj.ok.perform_async("member")
    assert jid is not None
    p, raw = taken_with_its_hold(cluster, b.bid, jid)
    reply = requeue_unmoved(p, raw)
    assert reply[0] == 1  # moved back to its queue
    entry_id = f"hold:{b.bid}:{jid}"
    entry = codec.loads(cluster.hget(outbox.key(p), entry_id))
    assert entry["kind"] == "batch_hold" and entry["list"] == shards.in_progress(p, GONE)
    assert status(b.bid).holds == 1  # not released until the entry is moved
    home = cw_client.connection()
    queues.pause(home, "bq")
    start(workers, redis_cluster, out)
    wait_until(lambda: cluster.hget(outbox.key(p), entry_id) is None, timeout=60, message="swept")
    held = status(b.bid)
    assert (held.holds, held.held_by, held.pending) == (0, {}, 1)
    queues.resume(home, "bq")
    wait_until(lambda: all_ran(out, b.bid, BOTH), timeout=60, message="the callbacks ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    assert all_ran(out, b.bid, BOTH) and never_early(out)


@pytest.mark.parametrize("retaken", [False, True])
def test_a_hold_release_applied_twice_releases_once_and_never_a_later_runs_hold(
    api: None, cluster: redis.RedisCluster, retaken: bool
) -> None:
    """The entry moved twice (a mover whose reply was lost, and a sweep): one release. A hold a later
    run of the member took over (its value another list) is left to that run."""
    with cogworker.batch("hold-twice") as b:
        jid = sbj.ok.perform_async("member")
    assert jid is not None
    p, raw = taken_with_its_hold(cluster, b.bid, jid)
    requeue_unmoved(p, raw)
    if retaken:
        cluster.hset(keys.batch(b.bid), f"hold:run:{jid}", "a-later-run's-list")
    entry = outbox.decode(f"hold:{b.bid}:{jid}", cluster.hget(outbox.key(p), f"hold:{b.bid}:{jid}"))
    mover = outbox.Mover(fanout.clients_of(cw_client.connection()), cw_client.settings())
    assert mover.move(p, entry) and mover.move(p, entry)
    held = status(b.bid)
    if retaken:
        assert (held.holds, held.held_by) == (1, {f"run:{jid}": "a-later-run's-list"})
    else:
        assert (held.holds, held.held_by) == (0, {})
    assert held.pending == 1 and held.completed_at is None  # the member is still pending
    assert cluster.hlen(outbox.key(p)) == 0 and cluster.hlen(keys.OUTBOX) == 0


def test_a_member_cancelled_while_its_worker_dies_counts_failed_and_completes_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    """Sharded recovery can't read the home cancel record in the partition's script: the member is
    requeued, and the worker that fetches it ends it unrun (cancelled), counted failed through its
    partition's outbox. It never runs again; on_complete runs once, on_success never."""
    with cogworker.batch("cancelled", **sbj.callbacks("cancelled")) as b:
        doomed_jid = sbj.blocks.perform_async("doomed")
        sbj.ok.perform_async("fine")
    assert doomed_jid is not None
    doomed = start(workers, redis_cluster, out, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: lines(out, "started"), timeout=30, message="the member running")
    wait_until(lambda: cogworker.cancel(doomed_jid).case == "running", timeout=10, message="cancelled")
    doomed.signal(signal.SIGKILL)  # a sync job sees its cancel only when it asks: it is still running
    doomed.proc.wait(timeout=10)
    start(workers, redis_cluster, out, **QUICK_RECOVERY)
    wait_until(lambda: all_ran(out, b.bid, {"complete": 1}), timeout=90, message="on_complete ran")
    wait_until(lambda: drained(cluster), timeout=30, message="drained")
    done = status(b.bid)
    counts = (done.total, done.pending, done.done, done.failed, done.dead, done.holds)
    assert counts == (2, 0, 2, 1, 0, 0)
    assert done.failures == {doomed_jid: "ended without running (cancelled)"}
    assert [tag for tag, _pid in lines(out, "started")] == ["doomed"]  # never ran again
    assert "doomed" not in [tag for tag, _pid in lines(out, "ran")]
    assert all_ran(out, b.bid, {"complete": 1})
