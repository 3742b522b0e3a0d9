"""Chains in the sharded layout (worker/settling/chain_sharded.py), on a real 3-master cluster: lost
replies of the partition ack, the home apply and the push (each resent by the retry on the job's thread:
one entry, the successor pushed once, a second run of the step writes nothing), an ack that never ran,
and MONITOR on every master showing both chain scripts touch only their declared keys, each script's
keys in one slot under the prefix."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import sharded_chain_jobs as jobs
from redis.crc import key_slot

import cogworker
from cogworker.api import client as cw_client
from cogworker.api import push_write
from cogworker.settings import load_settings
from cogworker.store import keys, scripts, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.settling import chain_sharded
from cogworker.worker.settling.settle import Settler
from cogworker.worker.settling.shard_route import ShardRoute
from tests.e2e.sharded import chain_support
from tests.e2e.sharded.chain_support import ended, masters_of, queues_on, start
from tests.e2e.sharded.conftest import PREFIX
from tests.e2e.sharded.pushing import queued
from tests.support.monitor import Command, Monitor
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import WorkerPool

api = chain_support.api
out = chain_support.out

SCRIPTS = {"EVAL", "EVALSHA"}
CHAIN_SCRIPTS = ("chain_ack_partition", "chain_apply")

# Lost replies, in this process, with the real settler and scripts: each write ran, its reply was lost,
# and the retry on the job's thread sent it again.


@dataclass
class Rig:
    settler: Settler
    route: ShardRoute
    cluster: redis.RedisCluster


@pytest.fixture
def rig(api: None, cluster: redis.RedisCluster) -> Iterator[Rig]:
    settings = load_settings()
    home = cw_client.connection()
    clients = ShardClients(settings, home=home)
    route = ShardRoute(clients, "rig", Placements(), PartitionHealth(clients))
    yield Rig(Settler(RedisContext.build(settings, client=home), "", route=route), route, cluster)


def fetched(rig: Rig, queue: str) -> Work:
    """The step waiting in `queue`'s partition, moved onto this process's list as a fetch does."""
    p = shards.Partition(queue)
    raw = rig.cluster.rpop(shards.queue_key(p))
    assert raw is not None
    rig.cluster.lpush(shards.in_progress(p, "rig"), raw)
    work = Work(queue, str(raw), partition=p)
    rig.route.placements.add([work])
    return work


def once_lost(real: Callable[..., Any]) -> Callable[..., Any]:
    """`real`, whose first call runs and then loses its reply."""
    calls = [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        reply = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 1:
            raise redis.ConnectionError("reply lost")
        return reply

    return call


class LosingScript:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.wrapped: Any = None

    def on(self, conn: redis.Redis) -> Any:
        if self.wrapped is None:
            self.wrapped = once_lost(self.real.on(conn))
        return self.wrapped


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
        ran += check_scripts(node, seen)
        node.close()
    assert ran >= 4  # two partition acks and two home applies, at least


def check_scripts(node: redis.Redis, commands: list[Command]) -> int:
    """The chain scripts among `commands` (known by their SHA): each named keys of one slot, under the
    prefix, and touched (or published on) no other. Returns how many ran."""
    ours = {hashlib.sha1(scripts.source(name).encode()).hexdigest().encode() for name in CHAIN_SCRIPTS}
    declared: set[bytes] | None = None
    count = 0
    for command in commands:
        if command.name in SCRIPTS:
            body = command.args[1]
            sha = body if command.name == "EVALSHA" else hashlib.sha1(body).hexdigest().encode()
            names = command.args[3 : 3 + int(command.args[2])]
            declared = set(names) if sha in ours else None
            if declared is not None:
                count += 1
                assert names and all(k.startswith(PREFIX.encode()) for k in names), names
                assert len({key_slot(k) for k in names}) == 1, names
        elif command.source == "lua" and declared is not None:
            if command.name == "PUBLISH":
                touched = [command.args[1]]
            else:
                found = node.command_getkeys(*command.args)
                touched = [k if isinstance(k, bytes) else str(k).encode() for k in found]
            assert set(touched) <= declared, command
    return count
