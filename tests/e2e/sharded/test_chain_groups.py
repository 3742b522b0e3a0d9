"""Groups inside chains in the sharded layout (api/chain_group_outbox.py) on a real 3-master cluster, with
real sharded workers: a first call in a fresh interpreter (a 3-member group in the middle, members on
three masters, results passed: the step after runs once, after every member, given their results in
order); a group first; a group last; a member retried; a member dead (the chain dead); a worker
SIGKILLed after the step-before's partition ack and the batch's creation, blocked in the members' push
(another worker's sweep pushes each member once); a member's worker SIGKILLed mid-run.
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


def outboxes(cluster: redis.RedisCluster) -> list[str]:
    return [str(k) for k in cluster.keys("*") if str(k).endswith(":outbox")]


def batch_counts(bid: str) -> tuple[int, int, int, int]:
    batch = cogworker.batch_status(bid)
    assert batch is not None
    return batch.total, batch.done, batch.failed, batch.pending


def test_a_first_call_runs_a_group_in_the_middle_between_its_neighbours_with_results_in_order(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b, c = queues_on(redis_cluster, [None, None, None])
    assert len({master_of(redis_cluster, shards.Partition(q)) for q in (a, b, c)}) == 3
    start(workers, redis_cluster, out, [a, b, c])
    env = sharded_env(redis_cluster, COGWORKER_REQUIRE=APP)
    url = env.pop("COGWORKER_REDIS_URL")
    code = f"""
        import json, cogworker, sharded_chain_jobs as j
        pushed = cogworker.chain(
            j.first.s(1).set(queue="{a}"),
            cogworker.group(j.second.s(1).set(queue="{b}"), j.second.s(2).set(queue="{c}"),
                            j.second.s(3).set(queue="{a}")),
            j.third.s().set(queue="{b}"),
            pass_results=True,
        )
        print("RESULT", json.dumps(cogworker.result(pushed.jids[-1], timeout=40)))
        print("STATE", cogworker.chain_status(pushed.id)["state"])
        print("CID", pushed.id)
        print("BID", pushed.jids[1])
    """
    lines = dict(line.split(" ", 1) for line in first_call(code, url, timeout=60, **env).splitlines())
    assert json.loads(lines["RESULT"]) == {"total": [11, 12, 13, 11, 12, 13]}
    assert lines["STATE"] == "complete"
    seen = runs(out)
    assert seen[0] == "first 1" and sorted(seen[1:4]) == ["second 10 1", "second 10 2", "second 10 3"]
    assert seen[4:] == ["third [11, 12, 13]"]  # once, after every member, their results in order
    shown = run_cogworker({**env, "COGWORKER_REDIS_URL": url}, "chain", "show", lines["CID"], "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["state"] == "complete" and [s["state"] for s in status["steps"]] == ["done"] * 3
    assert status["steps"][1]["bid"] == lines["BID"]
    assert len(status["steps"][1]["members"]) == 3
    assert batch_counts(lines["BID"]) == (3, 3, 0, 0)  # read by this process, configured for the layout
    assert outboxes(cluster) == []  # every entry moved


def test_a_group_first_is_pushed_through_the_home_outbox(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b, c = queues_on(redis_cluster, [None, None, None])
    pushed = cogworker.chain(
        cogworker.group(jobs.step.s("x").set(queue=a), jobs.step.s("y").set(queue=b)),
        jobs.step.s("z").set(queue=c),
    )
    assert pushed is not None
    # Created and pushed by chain() itself, before any worker: its entry moved at once.
    assert batch_counts(pushed.jids[0]) == (2, 0, 0, 2)
    assert queued(cluster, shards.Partition(a)) and queued(cluster, shards.Partition(b))
    assert not cluster.exists(keys.OUTBOX)
    start(workers, redis_cluster, out, [a, b, c])
    assert ended(pushed.id)["state"] == "complete"
    seen = runs(out)
    assert sorted(seen[:2]) == ["step x", "step y"] and seen[2:] == ["step z"]
    assert batch_counts(pushed.jids[0]) == (2, 2, 0, 0)
    assert outboxes(cluster) == []


def test_a_group_last_completes_the_chain(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    pushed = cogworker.chain(
        jobs.step.s("a").set(queue=a),
        cogworker.group(jobs.step.s("x").set(queue=b), jobs.step.s("y").set(queue=a)),
    )
    assert pushed is not None
    start(workers, redis_cluster, out, [a, b])
    status = ended(pushed.id)
    assert status["state"] == "complete" and [s["state"] for s in status["steps"]] == ["done", "done"]
    seen = runs(out)
    assert seen[0] == "step a" and sorted(seen[1:]) == ["step x", "step y"]
    assert batch_counts(pushed.jids[1]) == (2, 2, 0, 0)


def test_a_member_retried_then_succeeding_continues_the_chain_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    group = cogworker.group(
        jobs.step.s("m1").set(queue=b), jobs.flaky.s("m2").set(queue=b), jobs.step.s("m3")
    )
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), group, jobs.step.s("after").set(queue=a))
    assert pushed is not None
    start(workers, redis_cluster, out, [a, b, "default"])
    assert ended(pushed.id)["state"] == "complete"
    seen = runs(out)
    assert seen[0] == "step a" and seen[-1] == "step after"
    assert sorted(seen[1:-1]) == ["flaky m2", "flaky m2", "step m1", "step m3"]
    assert batch_counts(pushed.jids[1]) == (3, 3, 0, 0)
    assert all(queued(cluster, shards.Partition(q)) == [] for q in (a, b, "default"))


def test_a_member_that_goes_to_dead_stops_the_chain(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    group = cogworker.group(jobs.step.s("m1").set(queue=b), jobs.doomed.s("m2").set(queue=b))
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), group, jobs.step.s("after").set(queue=a))
    assert pushed is not None
    start(workers, redis_cluster, out, [a, b])
    status = ended(pushed.id)
    assert status["state"] == "dead"
    assert [s["state"] for s in status["steps"]] == ["done", "dead", "pending"]
    assert status["error"] == {"error_class": "ValueError", "error_message": "m2 is doomed"}
    doomed = status["steps"][1]["members"][1]
    # The batch's on_death (group_died) records the member on the chain; its on_success never runs.
    wait_until(
        lambda: cluster.hget(keys.chain(pushed.id), "dead_jid") == doomed, timeout=30, message="on_death"
    )
    batch = cogworker.batch_status(pushed.jids[1])
    assert batch is not None and (batch.dead, batch.failed, batch.done) == (1, 1, 2)
    assert sorted(runs(out)) == ["doomed m2", "step a", "step m1"]
    assert cluster.zcard(shards.dead(shards.Partition(b))) == 1
    assert queued(cluster, shards.Partition(a)) == []  # "after" never pushed


def test_a_worker_killed_after_the_ack_and_the_batch_creation_has_each_member_pushed_once_by_a_sweep(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    # The step before the group is on the home slot's master; one member's master is another one,
    # stopped: the mover blocks in the members' push, after the partition ack and the home apply.
    home = home_master(redis_cluster)
    others = [p for p in masters_of(redis_cluster) if p != home]
    # Members go to queues the killed worker doesn't read (it would hold a member it fetched).
    a, d = queues_on(redis_cluster, [home, home])
    b, c = queues_on(redis_cluster, others)
    node = next(n for n in redis_cluster.nodes if n.port == master_of(redis_cluster, shards.Partition(c)))
    assert node.proc is not None and node.port != home
    group = cogworker.group(
        jobs.step.s("m1").set(queue=d), jobs.step.s("m2").set(queue=b), jobs.step.s("m3").set(queue=c)
    )
    pushed = cogworker.chain(jobs.nap.s("a", 0.8).set(queue=a), group, jobs.step.s("after").set(queue=a))
    assert pushed is not None
    bid = pushed.jids[1]
    victim = start(workers, redis_cluster, out, [a], COGWORKER_REDIS_TIMEOUT_S="30")
    entry = chain_sharded.entry_id(pushed.id, 0)
    outbox_a = shards.outbox(shards.Partition(a))
    wait_until(lambda: "start a" in out.read_text(), timeout=30, message="the first step to start")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: cluster.hexists(outbox_a, entry) and cluster.exists(keys.batch(bid)),
            timeout=10,
            message="the partition ack and the batch's creation",
        )
        victim.signal(signal.SIGKILL)
        assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    redis_cluster.wait_ok()
    assert cluster.hexists(outbox_a, entry)  # left for a sweep
    assert batch_counts(bid) == (3, 0, 0, 3)  # every member pending before any ran
    start(
        workers, redis_cluster, out, [a, b, c, d]
    )  # its poller's sweep moves the entry once its lease lapsed
    assert ended(pushed.id, timeout=90)["state"] == "complete"
    seen = runs(out)
    assert seen[0] == "nap a" and seen[-1] == "step after"
    assert sorted(seen[1:-1]) == ["step m1", "step m2", "step m3"]  # each member once
    assert batch_counts(bid) == (3, 3, 0, 0)
    assert not cluster.exists(outbox_a)


def test_a_members_worker_killed_mid_run_has_the_member_rerun_and_the_chain_continued_once(
    api: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    a, b = queues_on(redis_cluster, [None, None])
    group = cogworker.group(jobs.step.s("m1").set(queue=a), jobs.stall_once.s("m2").set(queue=b))
    pushed = cogworker.chain(jobs.step.s("a").set(queue=a), group, jobs.step.s("c").set(queue=a))
    assert pushed is not None
    victim = start(workers, redis_cluster, out, [a, b], **QUICK_RECOVERY)
    wait_until(lambda: "stall_once m2" in runs(out), timeout=30, message="the stalling member's first run")
    wait_until(lambda: batch_counts(pushed.jids[1])[3] == 1, timeout=30, message="the other member counted")
    victim.signal(signal.SIGKILL)
    assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    assert batch_counts(pushed.jids[1]) == (2, 1, 0, 1)  # killed mid-run: pending, not failed
    start(workers, redis_cluster, out, [a, b], **QUICK_RECOVERY)
    assert ended(pushed.id, timeout=90)["state"] == "complete"
    seen = runs(out)
    assert sorted(seen) == ["stall_once m2", "stall_once m2", "step a", "step c", "step m1"]
    assert seen[-1] == "step c"
    assert all(queued(cluster, shards.Partition(q)) == [] for q in (a, b))
