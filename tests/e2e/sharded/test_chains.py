"""Chains in the sharded layout (worker/settling/chain_sharded.py) on a real 3-master cluster, with real
sharded workers: steps on queues of different masters run in order with results passed on; a retried
step and a dead step; a worker SIGKILLed after a step's partition ack and before its successor's push
(another worker's sweep pushes it, once); a worker SIGKILLed mid-step; lost replies of the partition
ack, the home apply and the push (each resent: one entry, the successor pushed once); and every
script touching only its declared keys, each script's keys in one slot, under the prefix.
tests/apps/sharded_chain_jobs.py records each run in a file, outside the cluster under test."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import redis
import sharded_chain_jobs as jobs

import cogworker
from cogworker.store import keys, shards
from cogworker.worker.settling import chain_sharded
from tests.e2e.sharded import chain_support
from tests.e2e.sharded.chain_support import APP, ended, home_master, masters_of, queues_on, runs, start
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import master_of, queued
from tests.support.daemon_env import QUICK_RECOVERY, run_cogworker
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = chain_support.api


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
