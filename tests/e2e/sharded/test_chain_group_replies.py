"""Groups inside chains in the sharded layout (api/chain_group_outbox.py), on a real 3-master cluster:
lost replies of the step-before's partition ack, of its home apply (the record's update), of the batch's
creation and of the members' push (each resent by the retry on the job's thread: the batch created
once with every member pending, each member pushed once, a second run of the step writes nothing); a
group first whose move never ran in chain() (a worker's sweep creates and pushes it); and MONITOR on
every master showing the chain, group and batch scripts touch only their declared keys, each script's
keys in one slot under the prefix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
import sharded_chain_jobs as jobs

import cogworker
from cogworker.api import chain_group_outbox, push_write
from cogworker.store import keys, outbox, shards
from cogworker.worker.settling import chain_sharded
from cogworker.worker.settling.chain_step import successor
from tests.e2e.sharded import chain_rig, chain_support
from tests.e2e.sharded.chain_rig import LosingScript, Rig, check_scripts, fetched, once_lost
from tests.e2e.sharded.chain_support import ended, masters_of, queues_on, runs, start
from tests.e2e.sharded.conftest import PREFIX
from tests.e2e.sharded.pushing import queued
from tests.support.monitor import Monitor
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import WorkerPool

api = chain_support.api
rig = chain_rig.rig

GROUP_SCRIPTS = ("chain_ack_partition", "chain_apply", "group_create")


@pytest.mark.parametrize("lost", ["ack", "apply", "create", "push"])
def test_a_lost_reply_resent_creates_the_group_once_and_pushes_each_member_once(
    rig: Rig, redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    a, b, c = queues_on(redis_cluster, [None, None, None])
    group = cogworker.group(jobs.second.s(1).set(queue=b), jobs.second.s(2).set(queue=c), jobs.second.s(3))
    pushed = cogworker.chain(
        jobs.first.s(1).set(queue=a), group, jobs.third.s().set(queue=a), pass_results=True
    )
    assert pushed is not None
    bid = pushed.jids[1]
    work = fetched(rig, a)
    if lost == "ack":
        monkeypatch.setattr(chain_sharded, "_ack", LosingScript(chain_sharded._ack))
    elif lost == "apply":
        monkeypatch.setattr(chain_sharded, "_apply", LosingScript(chain_sharded._apply))
    elif lost == "create":
        monkeypatch.setattr(chain_group_outbox, "_create", LosingScript(chain_group_outbox._create))
    else:
        monkeypatch.setattr(push_write, "write", once_lost(push_write.write))
    job = json.loads(work.raw)
    record = json.dumps({"value": 10})
    nxt = successor(job, record)
    assert not isinstance(nxt, dict) and nxt is not None  # a group
    chain_sharded.succeeded(rig.settler, rig.route, work, job, nxt, record, 60.0)
    members = [
        str(m["jid"]) for m in json.loads(str(rig.cluster.hget(keys.chain(pushed.id), "steps")))[1]["members"]
    ]
    # Created once, every member pending; each member queued once, in its own partition, with the
    # previous result first.
    assert rig.cluster.hget(keys.batch(bid), "total") == "3"
    assert rig.cluster.smembers(keys.batch_pending(bid)) == set(members)
    assert rig.cluster.hget(keys.batch(bid), "holds") == "0"
    by_queue = {q: queued(rig.cluster, shards.Partition(q)) for q in (b, c, "default")}
    assert by_queue == {b: [members[0]], c: [members[1]], "default": [members[2]]}
    first_member = json.loads(rig.cluster.lrange(shards.queue_key(shards.Partition(b)), 0, -1)[0])
    assert first_member["args"] == [10, 1] and first_member["bid"] == bid
    pa = shards.Partition(a)
    assert not rig.cluster.exists(shards.outbox(pa)) and rig.cluster.llen(shards.in_progress(pa, "rig")) == 0
    assert rig.cluster.get(shards.stat(pa, "processed")) == "1"
    chain = rig.cluster.hgetall(keys.chain(pushed.id))
    assert chain["done"] == "1" and chain["state"] == "running"
    # A second run of the same step (its list no longer holds it) writes and pushes nothing.
    rig.route.placements.add([work])
    assert not chain_sharded.succeeded(rig.settler, rig.route, work, job, nxt, record, 60.0)
    assert {q: queued(rig.cluster, shards.Partition(q)) for q in (b, c, "default")} == by_queue
    assert rig.cluster.hget(keys.batch(bid), "total") == "3"


def test_a_group_entry_moved_again_creates_nothing_and_pushes_nothing(
    rig: Rig, redis_cluster: RedisCluster
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    group = cogworker.group(jobs.step.s("x").set(queue=b), jobs.step.s("y").set(queue=b))
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), group)
    assert pushed is not None
    work = fetched(rig, a)
    job = json.loads(work.raw)
    nxt = successor(job, None)
    text = chain_sharded.entry(job, nxt, None, None)
    mover = outbox.Mover(rig.route.clients, rig.settler.settings)
    entry = outbox.decode("again", text)
    mover.move(shards.Partition(a), entry)
    assert len(queued(rig.cluster, shards.Partition(b))) == 2
    rig.cluster.hset(keys.batch(pushed.jids[1]), "done", 1)  # a member ended meanwhile
    mover.move(shards.Partition(a), entry)  # a second mover of the same entry
    assert len(queued(rig.cluster, shards.Partition(b))) == 2
    assert rig.cluster.hget(keys.batch(pushed.jids[1]), "done") == "1"  # not created again


def test_a_group_first_whose_move_never_ran_is_created_and_pushed_by_a_sweep(
    api: None,
    redis_cluster: RedisCluster,
    cluster: redis.RedisCluster,
    workers: WorkerPool,
    out: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = queues_on(redis_cluster, [None, None])

    def down(self: Any, where: Any, ids: Any) -> Any:
        raise redis.ConnectionError("never sent")

    with monkeypatch.context() as patched:
        patched.setattr(outbox.Mover, "move_ids", down)
        pushed = cogworker.chain(
            cogworker.group(jobs.step.s("x").set(queue=a), jobs.step.s("y").set(queue=b)),
            jobs.step.s("z").set(queue=a),
        )
    assert pushed is not None  # the entry is written: the group will be pushed
    assert cluster.hexists(keys.OUTBOX, chain_group_outbox.entry_id(pushed.jids[0]))
    assert not cluster.exists(keys.batch(pushed.jids[0]))
    assert queued(cluster, shards.Partition(a)) == [] and queued(cluster, shards.Partition(b)) == []
    start(workers, redis_cluster, out, [a, b])  # its poller's sweep moves the entry once 10 s old
    assert ended(pushed.id, timeout=90)["state"] == "complete"
    seen = runs(out)
    assert sorted(seen[:2]) == ["step x", "step y"] and seen[2:] == ["step z"]
    assert not cluster.exists(keys.OUTBOX)


def test_group_scripts_touch_only_their_declared_keys_each_in_one_slot_under_the_prefix(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    masters = masters_of(redis_cluster)
    monitors = [Monitor(f"redis://127.0.0.1:{port}") for port in masters]
    try:
        a, b, c = queues_on(redis_cluster, [None, None, None])
        group = cogworker.group(jobs.second.s(1).set(queue=b), jobs.second.s(2).set(queue=c))
        middle = cogworker.chain(
            jobs.first.s(1).set(queue=a), group, jobs.third.s().set(queue=a), pass_results=True
        )
        first = cogworker.chain(cogworker.group(jobs.step.s("x").set(queue=c)), jobs.step.s("y").set(queue=b))
        assert middle is not None and first is not None
        start(workers, redis_cluster, out, [a, b, c])
        assert ended(middle.id)["state"] == "complete" and ended(first.id)["state"] == "complete"
    finally:
        commands = [monitor.stop() for monitor in monitors]
    ran = 0
    for port, seen in zip(masters, commands, strict=True):
        node = redis.Redis(host="127.0.0.1", port=port)
        ran += check_scripts(node, seen, GROUP_SCRIPTS)
        node.close()
    # Two group creations; the partition acks and home applies of first, continue_group (twice) and y.
    assert ran >= 2 + 2 * 4
    # Every other key the deployment wrote is under its prefix, in its home or a partition's slot.
    assert all(str(k).startswith(PREFIX) for k in cluster.keys("*")), cluster.keys("*")
