"""Chains in the sharded layout (worker/settling/chain_sharded.py), on a real 3-master cluster: lost
replies of the partition ack, the home apply and the push (each resent by the retry on the job's thread:
one entry, the successor pushed once, a second run of the step writes nothing), an ack that never ran,
and MONITOR on every master showing both chain scripts touch only their declared keys, each script's
keys in one slot under the prefix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
import sharded_chain_jobs as jobs

import cogworker
from cogworker.api import push_write
from cogworker.store import keys, shards
from cogworker.worker.settling import chain_sharded
from tests.e2e.sharded import chain_rig, chain_support
from tests.e2e.sharded.chain_rig import LosingScript, Rig, check_scripts, fetched, once_lost
from tests.e2e.sharded.chain_support import ended, masters_of, queues_on, start
from tests.e2e.sharded.pushing import queued
from tests.support.monitor import Monitor
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import WorkerPool

api = chain_support.api

rig = chain_rig.rig
CHAIN_SCRIPTS = ("chain_ack_partition", "chain_apply")


@pytest.mark.parametrize("lost", ["ack", "apply", "push"])
def test_a_lost_reply_resent_leaves_one_entry_and_pushes_the_successor_once(
    rig: Rig, redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), jobs.step.s("b").set(queue=b), pass_results=True)
    assert pushed is not None
    work = fetched(rig, a)
    if lost == "ack":
        monkeypatch.setattr(chain_sharded, "_ack", LosingScript(chain_sharded._ack))
    elif lost == "apply":
        monkeypatch.setattr(chain_sharded, "_apply", LosingScript(chain_sharded._apply))
    else:
        monkeypatch.setattr(push_write, "write", once_lost(push_write.write))
    job = json.loads(work.raw)
    record = json.dumps({"value": "a"})
    from cogworker.worker.settling.chain_step import successor

    nxt = successor(job, record)
    assert isinstance(nxt, dict)
    chain_sharded.succeeded(rig.settler, rig.route, work, job, nxt, record, 60.0)
    pa, pb = shards.Partition(a), shards.Partition(b)
    assert queued(rig.cluster, pb) == [pushed.jids[1]]
    assert json.loads(rig.cluster.lrange(shards.queue_key(pb), 0, -1)[0])["args"] == ["a", "b"]
    assert not rig.cluster.exists(shards.outbox(pa)) and rig.cluster.llen(shards.in_progress(pa, "rig")) == 0
    assert rig.cluster.get(shards.stat(pa, "processed")) == "1"
    record_now = rig.cluster.hgetall(keys.chain(pushed.id))
    assert record_now["done"] == "1" and record_now["state"] == "running"
    assert json.loads(rig.cluster.get(keys.result(pushed.jids[0]))) == {"value": "a"}
    # A second run of the same step, fetched here again (its list no longer holds it: recovery took
    # it), writes and pushes nothing.
    rig.route.placements.add([work])
    assert not chain_sharded.succeeded(rig.settler, rig.route, work, job, nxt, record, 60.0)
    assert queued(rig.cluster, pb) == [pushed.jids[1]] and not rig.cluster.exists(shards.outbox(pa))


def test_an_ack_that_never_ran_leaves_the_step_in_progress_and_writes_nothing(
    rig: Rig, redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), jobs.step.s("b").set(queue=b))
    assert pushed is not None
    work = fetched(rig, a)

    class Down:
        def on(self, conn: redis.Redis) -> Any:
            def refuse(**kwargs: Any) -> Any:
                raise redis.ConnectionError("never sent")

            return refuse

    monkeypatch.setattr(chain_sharded, "_ack", Down())
    monkeypatch.setattr(chain_sharded, "ACK_RETRY_S", 0.2)
    job = json.loads(work.raw)
    assert not chain_sharded.succeeded(rig.settler, rig.route, work, job, None, None, None)
    pa = shards.Partition(a)
    assert rig.cluster.llen(shards.in_progress(pa, "rig")) == 1  # runs again after recovery
    assert not rig.cluster.exists(shards.outbox(pa)) and queued(rig.cluster, shards.Partition(b)) == []
    assert rig.cluster.hget(keys.chain(pushed.id), "done") == "0"


def test_chain_scripts_touch_only_their_declared_keys_each_in_one_slot_under_the_prefix(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    masters = masters_of(redis_cluster)
    monitors = [Monitor(f"redis://127.0.0.1:{port}") for port in masters]
    try:
        a, b = queues_on(redis_cluster, [None, None])
        pushed = cogworker.chain(jobs.first.s(1).set(queue=a), jobs.third.s().set(queue=b), pass_results=True)
        assert pushed is not None
        start(workers, redis_cluster, out, [a, b])
        assert ended(pushed.id)["state"] == "complete"
    finally:
        commands = [monitor.stop() for monitor in monitors]
    ran = 0
    for port, seen in zip(masters, commands, strict=True):
        node = redis.Redis(host="127.0.0.1", port=port)
        ran += check_scripts(node, seen, CHAIN_SCRIPTS)
        node.close()
    assert ran >= 4  # two partition acks and two home applies, at least
