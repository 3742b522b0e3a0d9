"""Chains in the sharded layout (worker/settling/chain_sharded.py) on a real 3-master cluster, with real
sharded workers: steps on queues of different masters run in order with results passed on; a retried
step and a dead step; a worker SIGKILLed after a step's partition ack and before its successor's push
(another worker's sweep pushes it, once); a worker SIGKILLed mid-step; lost replies of the partition
ack, the home apply and the push (each resent: one entry, the successor pushed once); and every
script touching only its declared keys, each script's keys in one slot, under the prefix.
tests/apps/sharded_chain_jobs.py records each run in a file, outside the cluster under test."""

from __future__ import annotations

import hashlib
import json
import os
import signal
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
from tests.e2e.sharded.conftest import PREFIX, sharded_env
from tests.e2e.sharded.pushing import configured_api, master_of, queued
from tests.support.daemon_env import QUICK_RECOVERY, run_cogworker
from tests.support.first_call import first_call
from tests.support.monitor import Command, Monitor
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

APP = "sharded_chain_jobs"
SCRIPTS = {"EVAL", "EVALSHA"}
CHAIN_SCRIPTS = ("chain_ack_partition", "chain_apply")


def masters_of(redis_cluster: RedisCluster) -> list[int]:
    """The three masters' ports (each serves one of the three slot ranges)."""
    return sorted({redis_cluster.owner(slot)[0] for slot in (0, 8000, 16000)})


def home_master(redis_cluster: RedisCluster) -> int:
    return redis_cluster.owner(key_slot(b"home"))[0]


def queues_on(redis_cluster: RedisCluster, masters: list[int | None]) -> list[str]:
    """One queue per entry of `masters`, each on that master (None: any master no other queue has)."""
    names = [f"cq{i}" for i in range(200)]
    chosen: list[str] = []
    for want in masters:
        taken = {master_of(redis_cluster, shards.Partition(q)) for q in chosen}
        chosen.append(
            next(
                n
                for n in names
                if n not in chosen
                and (
                    master_of(redis_cluster, shards.Partition(n)) == want
                    if want is not None
                    else master_of(redis_cluster, shards.Partition(n)) not in taken
                )
            )
        )
    return chosen


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.touch()
    return path


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch):
        yield


def runs(out: Path) -> list[str]:
    return [line for line in out.read_text().splitlines() if not line.startswith("start ")]


def start(
    workers: WorkerPool, redis_cluster: RedisCluster, out: Path, queues: list[str], **extra: str
) -> Worker:
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE=APP,
        COGWORKER_QUEUES=",".join(queues),
        COGWORKER_POLL_INTERVAL_S="0.2",
        SHARDED_TEST_OUT=str(out),
        COGWORKER_LOG_LEVEL="info",
        **extra,
    )
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def ended(cid: str, timeout: float = 60) -> dict[str, Any]:
    def over() -> dict[str, Any] | None:
        status = cogworker.chain_status(cid)
        return status if status is not None and status["state"] != "running" else None

    found: dict[str, Any] = wait_until(over, timeout=timeout, message=f"chain {cid} to end")
    return found


def test_a_first_call_runs_three_steps_on_three_masters_in_order_with_results_passed(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b, c = queues_on(redis_cluster, [None, None, None])
    assert len({master_of(redis_cluster, shards.Partition(q)) for q in (a, b, c)}) == 3
    start(workers, redis_cluster, out, [a, b, c])
    env = sharded_env(redis_cluster, COGWORKER_REQUIRE=APP)
    url = env.pop("COGWORKER_REDIS_URL")
    code = f"""
        import json, cogworker, sharded_chain_jobs as j
        pushed = cogworker.chain(
            j.first.s(1).set(queue="{a}"), j.second.s(2).set(queue="{b}"), j.third.s().set(queue="{c}"),
            pass_results=True,
        )
        print("RESULT", json.dumps(cogworker.result(pushed.jids[-1], timeout=40)))
        print("STATE", cogworker.chain_status(pushed.id)["state"])
        print("CID", pushed.id)
    """
    lines = dict(line.split(" ", 1) for line in first_call(code, url, timeout=60, **env).splitlines())
    assert json.loads(lines["RESULT"]) == {"total": 24}
    assert lines["STATE"] == "complete"
    assert runs(out) == ["first 1", "second 10 2", "third 12"]
    shown = run_cogworker({**env, "COGWORKER_REDIS_URL": url}, "chain", "show", lines["CID"], "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["state"] == "complete" and status["done"] == 3
    assert [s["state"] for s in status["steps"]] == ["done", "done", "done"]
    assert [s["queue"] for s in status["steps"]] == [a, b, c]
    # Every outbox entry moved: none left in any slot.
    assert [k for k in cluster.keys("*") if str(k).endswith(":outbox")] == []


def test_a_step_retried_then_succeeding_continues_the_chain_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), jobs.flaky.s("b").set(queue=b), jobs.step.s("c"))
    assert pushed is not None
    start(workers, redis_cluster, out, [a, b, "default"])
    assert ended(pushed.id)["state"] == "complete"
    assert runs(out) == ["step a", "flaky b", "flaky b", "step c"]
    assert all(queued(cluster, shards.Partition(q)) == [] for q in (a, b, "default"))


def test_a_dead_step_stops_the_chain(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), jobs.doomed.s("b").set(queue=b), jobs.step.s("c"))
    assert pushed is not None
    start(workers, redis_cluster, out, [a, b, "default"])
    status = ended(pushed.id)
    assert status["state"] == "dead"
    assert [s["state"] for s in status["steps"]] == ["done", "dead", "pending"]
    assert status["error"] == {"error_class": "ValueError", "error_message": "b is doomed"}
    assert runs(out) == ["step a", "doomed b"]
    dead = shards.dead(shards.Partition(b))  # filed in its own partition's dead set
    wait_until(lambda: cluster.zcard(dead) == 1, timeout=10, message="the dead step filed")


def test_a_worker_killed_after_the_partition_ack_and_before_the_push_has_the_successor_pushed_once_by_a_sweep(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    # The next step's master is neither the home slot's nor the first step's: stopping it blocks the
    # mover in its push only, after the partition ack and the home apply.
    home = home_master(redis_cluster)
    others = [p for p in masters_of(redis_cluster) if p != home]
    a = queues_on(redis_cluster, [home])[0]
    third = next(p for p in others if p != master_of(redis_cluster, shards.Partition(a)))
    b = queues_on(redis_cluster, [third])[0]
    stopped_port = master_of(redis_cluster, shards.Partition(b))
    assert stopped_port in others
    node = next(n for n in redis_cluster.nodes if n.port == stopped_port)
    assert node.proc is not None
    pushed = cogworker.chain(
        jobs.nap.s("a", 0.8).set(queue=a), jobs.step.s("b").set(queue=b), jobs.step.s("c").set(queue=a)
    )
    assert pushed is not None
    victim = start(workers, redis_cluster, out, [a], COGWORKER_REDIS_TIMEOUT_S="30")
    entry = chain_sharded.entry_id(pushed.id, 0)
    outbox_a = shards.outbox(shards.Partition(a))
    wait_until(lambda: "start a" in out.read_text(), timeout=30, message="the first step to start")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        # The ack wrote the entry and the apply recorded the step: the mover is blocked in the push.
        wait_until(
            lambda: cluster.hexists(outbox_a, entry) and cluster.hget(keys.chain(pushed.id), "done") == "1",
            timeout=10,
            message="the partition ack and the home apply",
        )
        victim.signal(signal.SIGKILL)
        assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    redis_cluster.wait_ok()
    assert cluster.hexists(outbox_a, entry) and queued(cluster, shards.Partition(b)) == []
    start(workers, redis_cluster, out, [a, b])  # its poller's sweep moves the entry once its lease lapsed
    assert ended(pushed.id, timeout=90)["state"] == "complete"
    assert runs(out) == ["nap a", "step b", "step c"]
    assert not cluster.exists(outbox_a)


def test_a_worker_killed_mid_step_has_the_step_rerun_and_its_successor_pushed_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), jobs.stall_once.s("b").set(queue=b),
                             jobs.step.s("c").set(queue=a))  # fmt: skip
    assert pushed is not None
    victim = start(workers, redis_cluster, out, [a, b], **QUICK_RECOVERY)
    wait_until(lambda: "stall_once b" in runs(out), timeout=30, message="the stalling step's first run")
    victim.signal(signal.SIGKILL)
    assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    start(workers, redis_cluster, out, [a, b], **QUICK_RECOVERY)
    assert ended(pushed.id, timeout=90)["state"] == "complete"
    assert runs(out) == ["step a", "stall_once b", "stall_once b", "step c"]
    assert all(queued(cluster, shards.Partition(q)) == [] for q in (a, b))


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
