"""Real workers SIGKILLed mid-job in a partitioned queue of the sharded layout, on a real 3-master
cluster: the jobs each held in several partitions come back to their own partitions and run once,
recovered by another process (worker/recovering/sharded_recovery.py), or at once by the swarm's
supervisor (supervisor/forkserver/redis_requeue.py)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api.payload import build
from cogworker.store import keys, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner
from tests.support.workers import WorkerPool

QUEUE = "rec"
PARTITIONS = 3
PER_PARTITION = 2
QUICK = {
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.3",
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "1",
    "COGWORKER_POLL_INTERVAL_S": "1",
}


@pytest.fixture
def layout(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This (the test's) process names keys as the deployment does; the one-slot layout after."""
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", f"{QUEUE}={PARTITIONS}")
    shards.use_settings(settings_module.load_settings())
    yield
    one_slot()


def part(index: int) -> shards.Partition:
    return shards.Partition(QUEUE, index)


def seed(cluster: redis.RedisCluster, out: Path) -> list[str]:
    """PER_PARTITION jobs in each partition, as a pusher of this layout writes them."""
    tags = []
    for index in range(PARTITIONS):
        for n in range(PER_PARTITION):
            tag = f"p{index}-{n}"
            job = build("sharded_recovery_jobs.hold_first", [str(out), tag], {}, queue=QUEUE, retry=True)
            job.pop("kwargs")
            job["enqueued_at"] = time.time()
            cluster.lpush(shards.queue_key(part(index)), codec.dumps(job))
            tags.append(tag)
    cluster.sadd(keys.QUEUES, QUEUE)
    cluster.hset(shards.partitions_key(), QUEUE, PARTITIONS)
    return tags


def lines(out: Path, kind: str) -> Counter[str]:
    text = out.read_text() if out.exists() else ""
    return Counter(
        line.split()[0].removeprefix(kind + "-") for line in text.splitlines() if line.startswith(kind + "-")
    )


def worker_env(redis_cluster: RedisCluster, **extra: str) -> dict[str, str]:
    return sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_recovery_jobs",
        COGWORKER_QUEUES=QUEUE,
        COGWORKER_QUEUE_PARTITIONS=f"{QUEUE}={PARTITIONS}",
        COGWORKER_LOG_LEVEL="info",
        **extra,
    )


def no_queued(cluster: redis.RedisCluster) -> bool:
    return all(cluster.llen(shards.queue_key(part(i))) == 0 for i in range(PARTITIONS))


def lists_of(cluster: redis.RedisCluster, identity: str) -> list[int]:
    return [int(cluster.llen(shards.in_progress(part(i), identity))) for i in range(PARTITIONS)]


@pytest.mark.timeout(120)
def test_a_killed_workers_jobs_in_every_partition_are_recovered_by_another_and_run_once(
    layout: None,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    workers: WorkerPool,
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs"
    tags = seed(cluster, out)
    env = worker_env(redis_cluster, COGWORKER_CONCURRENCY="8", **QUICK)
    victim = workers.start(env.pop("COGWORKER_REDIS_URL"), **env)
    wait_until(lambda: sorted(lines(out, "started")) == sorted(tags), timeout=45, message="every job started")
    identity = victim.identity()
    assert lists_of(cluster, identity) == [PER_PARTITION] * PARTITIONS  # held in every partition
    victim.kill()

    env = worker_env(redis_cluster, COGWORKER_CONCURRENCY="8", **QUICK)
    rescuer = workers.start(env.pop("COGWORKER_REDIS_URL"), **env)
    wait_until(lambda: sorted(lines(out, "ran")) == sorted(tags), timeout=45, message="every job run again")
    wait_until(
        lambda: not cluster.sismember(keys.IN_PROGRESS_IDENTITIES, identity),
        timeout=15,
        message="the dead identity forgotten",
    )
    assert lists_of(cluster, identity) == [0] * PARTITIONS
    assert sum(int(e["moved"]) for e in rescuer.events_named("requeued_orphans")) == len(tags)
    # No copy left anywhere to run a second time: every queue and the rescuer's lists are empty.
    rescuer_id = rescuer.identity()
    wait_until(
        lambda: lists_of(cluster, rescuer_id) == [0] * PARTITIONS and no_queued(cluster),
        timeout=15,
        message="every run acknowledged",
    )
    assert lines(out, "ran") == Counter(tags)
    assert rescuer.stop() == 0


@pytest.mark.timeout(150)
def test_the_swarm_requeues_a_killed_childs_jobs_in_every_partition_at_once(
    layout: None,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    swarms: SwarmRunner,
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs"
    tags = seed(cluster, out)
    env = worker_env(redis_cluster, COGWORKER_COUNT="2", COGWORKER_CONCURRENCY="8")
    env.pop("COGWORKER_REDIS_URL")
    # Orphan recovery waits the default 300 s of silence: only the supervisor's requeue can be this quick.
    swarm = swarms.start(**env)
    wait_until(lambda: sorted(lines(out, "started")) == sorted(tags), timeout=60, message="every job started")
    holders = {int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("started-")}
    identities = swarm.identities()
    for pid in holders:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: sorted(lines(out, "ran")) == sorted(tags), timeout=60, message="every job run again")
    requeued = swarm.supervisor_events("child_jobs_requeued")
    assert sum(int(e["moved"]) for e in requeued) == len(tags)
    for pid in holders:
        wait_until(
            lambda pid=pid: not cluster.sismember(keys.IN_PROGRESS_IDENTITIES, identities[pid]),
            timeout=15,
            message="the killed child's identity forgotten",
        )
        assert lists_of(cluster, identities[pid]) == [0] * PARTITIONS
    wait_until(
        lambda: (
            no_queued(cluster) and all(lists_of(cluster, i) == [0] * PARTITIONS for i in identities.values())
        ),
        timeout=15,
        message="every run acknowledged",
    )
    assert lines(out, "ran") == Counter(tags)
    assert swarm.stop() == 0


@pytest.mark.timeout(90)
def test_a_live_worker_puts_back_an_entry_on_its_partition_list_it_doesnt_hold(
    layout: None,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    workers: WorkerPool,
    tmp_path: Path,
) -> None:
    """As a fetch whose reply was lost leaves it: on the worker's list in partition 2, unknown to it.
    Its periodic reconcile (COGWORKER_ORPHAN_CHECK_INTERVAL_S) sends it back to that partition's queue,
    and it runs there, once."""
    out = tmp_path / "runs"
    env = worker_env(redis_cluster, **QUICK)
    worker = workers.start(env.pop("COGWORKER_REDIS_URL"), **env)
    identity = worker.identity()
    (tmp_path / "runs.stray.held").touch()  # not a first run: it runs through
    job = build("sharded_recovery_jobs.hold_first", [str(out), "stray"], {}, queue=QUEUE, retry=True)
    job.pop("kwargs")
    cluster.lpush(shards.in_progress(part(2), identity), codec.dumps(job))
    wait_until(lambda: lines(out, "ran") == Counter(["stray"]), timeout=30, message="the stray entry run")
    wait_until(
        lambda: lists_of(cluster, identity) == [0] * PARTITIONS, timeout=15, message="its list squared"
    )
    assert worker.events_named("requeued_unknown_jobs")
    assert no_queued(cluster)
    assert lines(out, "ran") == Counter(["stray"])
    assert worker.stop() == 0


@pytest.mark.timeout(90)
def test_a_job_cancelled_while_its_process_died_is_requeued_and_not_run(
    layout: None,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    workers: WorkerPool,
    tmp_path: Path,
) -> None:
    """The cancel record is in the home slot, out of the partition's requeue script's reach: the job
    goes back to its partition's queue, and the worker that fetches it knows the cancel and ends it
    unrun (docs/sharding.md "Recovery and schedules")."""
    out = tmp_path / "runs"
    (tmp_path / "runs.cancelled.held").touch()  # were it run, it would run through and say so
    job = build("sharded_recovery_jobs.hold_first", [str(out), "cancelled"], {}, queue=QUEUE, retry=True)
    job.pop("kwargs")
    dead_owner = "host:1:gone"
    cluster.lpush(shards.in_progress(part(1), dead_owner), codec.dumps(job))
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, dead_owner)
    cluster.zadd(keys.CANCELS, {str(job["jid"]): int(cluster.time()[0])})
    env = worker_env(redis_cluster, **QUICK)
    worker = workers.start(env.pop("COGWORKER_REDIS_URL"), **env)
    identity = worker.identity()
    wait_until(
        lambda: (
            not cluster.sismember(keys.IN_PROGRESS_IDENTITIES, dead_owner)
            and no_queued(cluster)
            and lists_of(cluster, identity) == [0] * PARTITIONS
        ),
        timeout=30,
        message="the job requeued, fetched and ended",
    )
    assert worker.events_named("job_cancelled")
    assert lines(out, "ran") == Counter()
    assert worker.stop() == 0
