"""The worker's job path in the sharded layout on a real 3-master cluster: fetch from every partition
of the queues it reads, ack and settle in each job's partition, death notices from every partition's
list, and one master stopped while the others' queues keep running (worker/fetching/sharded_fetch.py,
worker/settling/shard_route.py).

Jobs are seeded as a pusher of this layout writes them: the payload LPUSHed onto the partition's queue
key (the client's push is h39-push's), the queue added to the home registry."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api.payload import build
from cogworker.store import keys, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.tls_redis import APP_COMMANDS
from tests.support.workers import WorkerPool


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    path.touch()
    return path


@pytest.fixture
def layout(env: dict[str, str]) -> Iterator[None]:
    """This (the test's) process names keys as the sharded deployment does; the one-slot layout after."""
    shards.use_settings(settings_module.load_settings())
    yield
    shards.use_settings(
        SimpleNamespace(key_prefix=keys.DEFAULT_PREFIX, cluster_sharding="off", queue_partitions="")
    )


# Each job's retry option, as its client writes it in the payload (@job(retry=...)).
RETRY: dict[str, bool | int] = {"mark": True, "fails": 2, "dies": False}


def seed(cluster: redis.RedisCluster, partition: shards.Partition, name: str, *args: Any) -> str:
    job = build(f"sharded_jobs.{name}", list(args), {}, queue=partition.queue, retry=RETRY[name])
    job.pop("kwargs")
    job["enqueued_at"] = time.time()
    cluster.lpush(shards.queue_key(partition), codec.dumps(job))
    cluster.sadd(keys.QUEUES, partition.queue)
    return str(job["jid"])


def events(out: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in out.read_text().splitlines() if line.startswith(kind + " ")]


def start(workers: WorkerPool, redis_cluster: RedisCluster, out: Path, queues: str, **extra: str) -> Any:
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_jobs",
        COGWORKER_QUEUES=queues,
        SHARDED_TEST_OUT=str(out),
        COGWORKER_LOG_LEVEL="info",
        **extra,
    )
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def master_of(redis_cluster: RedisCluster, partition: shards.Partition) -> int:
    return redis_cluster.owner(key_slot(f"{partition.queue}#{partition.index}".encode()))[0]


def queues_on_two_masters(redis_cluster: RedisCluster) -> tuple[str, str]:
    names = [f"q{i}" for i in range(40)]
    first = names[0]
    other = next(
        n
        for n in names[1:]
        if master_of(redis_cluster, shards.Partition(n)) != master_of(redis_cluster, shards.Partition(first))
    )
    return first, other


def in_progress_lists(cluster: redis.RedisCluster, partitions: list[shards.Partition]) -> dict[str, int]:
    found: dict[str, int] = {}
    for p in partitions:
        prefix = p.prefix + "inprogress:"
        node = cluster.get_node_from_key(prefix)
        for key in cluster.scan_iter(match=prefix + "*", target_nodes=node):
            found[str(key)] = int(cluster.llen(key))
    return found


def stat_sum(cluster: redis.RedisCluster, partitions: list[shards.Partition], name: str) -> int:
    return sum(int(cluster.get(shards.stat(p, name)) or 0) for p in partitions)


def test_jobs_of_several_queues_and_partitions_run_once_and_leave_no_list_behind(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(4)]
    plain = [shards.Partition(name) for name in ("alpha", "beta", "gamma")]
    every = hot + plain
    tags = []
    for n in range(17 * len(every)):
        partition = every[n % len(every)]
        tag = f"{partition.queue}.{partition.index}.{n}"
        seed(cluster, partition, "mark", tag)
        tags.append(tag)
    extra = {"COGWORKER_QUEUE_PARTITIONS": "hot=4", "COGWORKER_CONCURRENCY": "4"}
    start(workers, redis_cluster, out, "hot,alpha,beta,gamma", **extra)
    start(workers, redis_cluster, out, "hot,alpha,beta,gamma", **extra)
    wait_until(lambda: len(events(out, "ran")) >= len(tags), timeout=60, message="every job ran")
    ran = Counter(tag for tag, _pid in events(out, "ran"))
    assert ran == Counter(tags)  # each exactly once
    # Acknowledged in its own partition: counted there, and every per-partition list emptied.
    wait_until(lambda: stat_sum(cluster, every, "processed") == len(tags), timeout=15, message="counted")
    for p in every:
        assert int(cluster.get(shards.stat(p, "processed")) or 0) == len(tags) // len(every)
    wait_until(
        lambda: not any(in_progress_lists(cluster, every).values()), timeout=15, message="lists emptied"
    )
    assert all(cluster.llen(shards.queue_key(p)) == 0 for p in every)


def test_one_fetcher_takes_from_every_partition_of_a_queue_in_turn(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(4)]
    for p in hot:
        for n in range(30):
            seed(cluster, p, "mark", f"{p.index}.{n}", 0.01)
    start(workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS="hot=4", COGWORKER_CONCURRENCY="1")
    wait_until(lambda: len(events(out, "ran")) >= 40, timeout=60, message="40 jobs ran")
    first = Counter(tag.split(".")[0] for tag, _pid in events(out, "ran")[:40])
    # One thread, one job a fetch, the partitions in a rotation: each gave about a quarter.
    assert sorted(first) == ["0", "1", "2", "3"]
    assert all(7 <= n <= 13 for n in first.values()), first


def test_weighted_queues_share_the_fetches_by_weight_across_partitions(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    heavy = [shards.Partition("heavy", i) for i in range(2)]
    light = shards.Partition("light")
    for n in range(100):
        seed(cluster, heavy[n % 2], "mark", f"heavy.{n}")
        seed(cluster, light, "mark", f"light.{n}")
    start(
        workers,
        redis_cluster,
        out,
        "heavy:3,light:1",
        COGWORKER_QUEUE_PARTITIONS="heavy=2",
        COGWORKER_CONCURRENCY="1",
    )
    wait_until(lambda: len(events(out, "ran")) >= 80, timeout=60, message="80 jobs ran")
    first = Counter(tag.split(".")[0] for tag, _pid in events(out, "ran")[:80])
    # heavy comes first 3 times in 4 (a weighted draw per queue, as in the one-slot layout).
    assert 45 <= first["heavy"] <= 72, first


def test_a_failing_job_is_filed_in_its_partitions_retry_set_and_counted_there(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(3)]
    target = hot[2]
    jid = seed(cluster, target, "fails", "f1")
    start(workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS="hot=3")
    wait_until(lambda: cluster.zcard(shards.retry(target)) == 1, timeout=30, message="filed in retry")
    entry = codec.loads_dict(cluster.zrange(shards.retry(target), 0, 0)[0]) or {}
    assert entry["jid"] == jid and entry["error_class"] == "ValueError"
    assert int(cluster.get(shards.stat(target, "failed")) or 0) == 1
    assert all(cluster.zcard(shards.retry(p)) == 0 for p in hot[:2])
    assert cluster.zcard(keys.RETRY) == 0  # nothing in the home slot
    assert not any(in_progress_lists(cluster, hot).values())


def test_a_job_out_of_retries_is_filed_in_its_partitions_dead_set_and_its_death_notice_handled(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(2)]
    jids = {seed(cluster, hot[1], "dies", "d1"), seed(cluster, shards.Partition("cold"), "dies", "d2")}
    start(workers, redis_cluster, out, "hot,cold", COGWORKER_QUEUE_PARTITIONS="hot=2")
    wait_until(lambda: len(events(out, "death")) == 2, timeout=30, message="both death notices handled")
    assert {jid for jid, _cause in events(out, "death")} == jids
    assert {cause for _jid, cause in events(out, "death")} == {"failed"}
    for p in (hot[1], shards.Partition("cold")):
        assert cluster.zcard(shards.dead(p)) == 1
        assert int(cluster.get(shards.stat(p, "failed")) or 0) == 1
        assert cluster.llen(shards.deaths(p)) == 0  # popped by the hook runner
    assert cluster.zcard(shards.dead(hot[0])) == 0


def test_a_batch_or_chain_payload_is_not_run_but_filed_in_dead_with_its_reason(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    p = shards.Partition("cold")
    job = build("sharded_jobs.mark", ["in-a-batch"], {}, queue="cold", retry=True, extra={"bid": "b1"})
    cluster.lpush(shards.queue_key(p), codec.dumps(job))
    cluster.sadd(keys.QUEUES, "cold")
    seed(cluster, p, "mark", "plain")
    start(workers, redis_cluster, out, "cold")
    wait_until(lambda: cluster.zcard(shards.dead(p)) == 1, timeout=30, message="filed in dead")
    wait_until(lambda: events(out, "ran"), timeout=30, message="the plain job ran")
    assert [tag for tag, _pid in events(out, "ran")] == ["plain"]
    entry = codec.loads_dict(cluster.zrange(shards.dead(p), 0, 0)[0]) or {}
    assert entry["jid"] == job["jid"] and entry["error_class"] == "cogworker.NotShardedYet"
    assert "batches" in entry["error_message"]
    assert int(cluster.get(shards.stat(p, "failed")) or 0) == 1
    wait_until(lambda: not any(in_progress_lists(cluster, [p]).values()), timeout=15, message="list empty")


def test_a_stopped_master_stalls_only_its_own_queues(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    stalled, running = queues_on_two_masters(redis_cluster)
    stalled_p, running_p = shards.Partition(stalled), shards.Partition(running)
    port = master_of(redis_cluster, stalled_p)
    node = next(n for n in redis_cluster.nodes if n.port == port)
    assert node.proc is not None
    worker = start(workers, redis_cluster, out, f"{stalled},{running}", COGWORKER_REDIS_TIMEOUT_S="2")
    seed(cluster, stalled_p, "mark", "before")
    wait_until(lambda: events(out, "ran"), timeout=30, message="the worker runs")
    # Jobs waiting on the stalled master's queue when it stops (seeded first: its slot is then away).
    for n in range(5):
        seed(cluster, stalled_p, "mark", f"stalled.{n}")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        for n in range(20):
            seed(cluster, running_p, "mark", f"running.{n}")
        wait_until(
            lambda: sum(tag.startswith("running.") for tag, _pid in events(out, "ran")) == 20,
            timeout=20,
            message="the other master's queue kept running",
        )
        # Within a couple of client timeouts, not stalled until the failover (or the master's return).
        assert time.monotonic() - began < 12
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    # The stopped master's replica takes over (or the master comes back): its jobs run then, once.
    wait_until(
        lambda: sum(tag.startswith("stalled.") for tag, _pid in events(out, "ran")) == 5,
        timeout=60,
        message="the stalled queue's jobs ran once its slot was served again",
    )
    redis_cluster.wait_ok()
    ran = Counter(tag for tag, _pid in events(out, "ran"))
    assert all(n == 1 for n in ran.values()), ran
    # The fetcher met the outage and skipped the partition, then found it served again.
    assert {e["partition"] for e in worker.events_named("partition_unavailable")} == {f"{stalled}#0"}
    assert worker.events_named("partition_available")


def test_an_expired_job_is_counted_in_its_partition_and_not_run(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    p = shards.Partition("cold")
    job = build("sharded_jobs.mark", ["late"], {}, queue="cold", retry=True, extra={"expires_at": 1.0})
    cluster.lpush(shards.queue_key(p), codec.dumps(job))
    cluster.sadd(keys.QUEUES, "cold")
    seed(cluster, p, "mark", "on-time")
    start(workers, redis_cluster, out, "cold")
    wait_until(lambda: events(out, "ran"), timeout=30, message="the other job ran")
    wait_until(lambda: cluster.get(shards.stat(p, "expired")) == "1", timeout=15, message="counted expired")
    assert [tag for tag, _pid in events(out, "ran")] == ["on-time"]
    assert cluster.get(keys.stat("expired")) is None  # nothing in the home slot
    wait_until(lambda: not any(in_progress_lists(cluster, [p]).values()), timeout=15, message="acked")


def acl_user(redis_cluster: RedisCluster, name: str, commands: str) -> str:
    """An ACL user limited to the sharded deployment's keys and channels (`cw:*`) on every node; the URL
    to use it."""
    for port in redis_cluster.ports:
        client = redis_cluster.client(port)
        try:
            allowed = [f"+{command}" for command in commands.split()]
            client.execute_command(
                *("ACL", "SETUSER", name, "reset", "on", ">Sharded-pw-7", "~cw:*", "&cw:*", "-@all"),
                *allowed,
            )
            client.execute_command("ACL", "LOG", "RESET")
        finally:
            client.close()
    return redis_cluster.url().replace("://", f"://{name}:Sharded-pw-7@", 1)


def test_the_documented_acl_commands_cover_the_sharded_job_path(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    url = acl_user(redis_cluster, "app", APP_COMMANDS + " cluster|slots")
    hot = [shards.Partition("hot", i) for i in range(2)]
    seed(cluster, hot[0], "mark", "m")
    seed(cluster, hot[1], "fails", "f")
    seed(cluster, hot[1], "dies", "d")
    worker = start(
        workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS="hot=2", COGWORKER_REDIS_URL=url
    )
    wait_until(lambda: events(out, "death"), timeout=30, message="the death notice handled")
    wait_until(lambda: cluster.zcard(shards.retry(hot[1])) == 1, timeout=30, message="the retry filed")
    assert [tag for tag, _pid in events(out, "ran")] == ["m"]
    assert worker.stop() == 0
    assert redis_cluster.refused("app") == []


def test_a_refused_lmove_is_an_error_not_a_fallback_to_basic_fetch(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    url = acl_user(redis_cluster, "nolmove", APP_COMMANDS.replace(" lmove ", " ") + " cluster|slots")
    seed(cluster, shards.Partition("cold"), "mark", "never")
    # One thread: fetch.lua moves a single job with LMOVE (several with LRANGE and LPUSH).
    worker = start(workers, redis_cluster, out, "cold", COGWORKER_REDIS_URL=url, COGWORKER_CONCURRENCY="1")
    wait_until(
        lambda: worker.events_named("fetch_refused_in_sharded_layout"), timeout=30, message="the refusal"
    )
    assert not worker.events_named("reliable_fetch_unsupported")  # no fallback to BRPOP
    assert events(out, "ran") == []
    assert cluster.llen(shards.queue_key(shards.Partition("cold"))) == 1


def test_an_idle_worker_waits_on_its_partitions_wake_channels_and_a_wake_up_starts_a_job(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(3)]
    start(workers, redis_cluster, out, "hot,cold", COGWORKER_QUEUE_PARTITIONS="hot=3")
    expected = {shards.wake_channel(p) for p in [*hot, shards.Partition("cold")]}

    def subscribed() -> set[str]:
        found: set[str] = set()
        for port in redis_cluster.ports:
            client = redis_cluster.client(port)
            try:
                found |= {str(c) for c in client.pubsub_channels("cw:*")}
            finally:
                client.close()
        return found

    wait_until(
        lambda: subscribed() == expected, timeout=30, message="one SUBSCRIBE to every partition's channel"
    )
    seed(cluster, hot[2], "mark", "woken")
    cluster.publish(shards.wake_channel(hot[2]), "hot")  # as the push script does
    wait_until(lambda: events(out, "ran"), timeout=10, message="the job ran")


def test_a_worker_follows_a_queues_recorded_partition_count_as_it_grows(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    worker = start(workers, redis_cluster, out, "hot")  # configured: one partition
    worker.identity()
    # A pusher configured with three raised the recorded count, and pushed to the third.
    cluster.hset(shards.partitions_key(), "hot", 3)
    seed(cluster, shards.Partition("hot", 2), "mark", "third")
    wait_until(lambda: events(out, "ran"), timeout=30, message="the third partition read within a refresh")


def test_a_failover_of_one_partitions_master_mid_run_loses_and_repeats_nothing(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    first, other = queues_on_two_masters(redis_cluster)
    parts = [shards.Partition(first), shards.Partition(other)]
    tags = []
    for n in range(60):
        tag = f"{parts[n % 2].queue}.{n}"
        seed(cluster, parts[n % 2], "mark", tag, 0.05)
        tags.append(tag)
    start(workers, redis_cluster, out, f"{first},{other}", COGWORKER_CONCURRENCY="4")
    wait_until(lambda: len(events(out, "ran")) >= 10, timeout=30, message="jobs running")
    # A coordinated failover (no write lost) while jobs of that partition run and wait for their acks.
    redis_cluster.failover(key_slot(f"{first}#0".encode()))
    wait_until(lambda: len(events(out, "ran")) >= len(tags), timeout=60, message="every job ran")
    ran = Counter(tag for tag, _pid in events(out, "ran"))
    assert ran == Counter(tags)
    wait_until(lambda: stat_sum(cluster, parts, "processed") == len(tags), timeout=30, message="all acked")
    wait_until(lambda: not any(in_progress_lists(cluster, parts).values()), timeout=15, message="lists empty")
