"""The worker's job path in the sharded layout on a real 3-master cluster: fetch from every partition
of the queues it reads, ack and settle in each job's partition, death notices from every partition's
list (worker/fetching/sharded_fetch.py, worker/settling/shard_route.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import redis

from cogworker import codec
from cogworker.api.payload import build
from cogworker.store import keys, shards
from tests.e2e.sharded import worker_support
from tests.e2e.sharded.worker_support import (
    events,
    in_progress_lists,
    seed,
    start,
    stat_sum,
)
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

# The shared fixtures, used here by name.
layout = worker_support.layout


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


def test_async_jobs_are_acked_and_filed_in_their_partitions_from_the_event_loop(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(2)]
    for n in range(10):
        seed(cluster, hot[n % 2], "amark", f"a{n}")
    seed(cluster, hot[1], "amark", "bad", True)
    start(workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS="hot=2")
    wait_until(lambda: len(events(out, "ran")) == 10, timeout=30, message="the async jobs ran")
    wait_until(lambda: cluster.zcard(shards.dead(hot[1])) == 1, timeout=15, message="the failure filed")
    wait_until(lambda: stat_sum(cluster, hot, "processed") == 10, timeout=15, message="acked")
    assert [int(cluster.get(shards.stat(p, "processed")) or 0) for p in hot] == [5, 5]
    wait_until(lambda: not any(in_progress_lists(cluster, hot).values()), timeout=15, message="lists empty")


def test_a_stopping_worker_acks_what_ran_and_gives_back_what_did_not_start_in_each_partition(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    hot = [shards.Partition("hot", i) for i in range(2)]
    tags = []
    for n in range(24):
        tags.append(f"{n}")
        seed(cluster, hot[n % 2], "mark", f"{n}", 0.3)
    worker = start(
        workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS="hot=2", COGWORKER_CONCURRENCY="4"
    )
    wait_until(lambda: len(events(out, "ran")) >= 4, timeout=30, message="jobs running")
    assert worker.stop() == 0
    ran = [tag for tag, _pid in events(out, "ran")]
    waiting = [
        str((codec.loads_dict(raw) or {})["args"][0])
        for p in hot
        for raw in cluster.lrange(shards.queue_key(p), 0, -1)
    ]
    # Every job either ran (once, acknowledged) or is back on its partition's queue, unstarted.
    assert sorted(ran + waiting, key=int) == tags
    assert stat_sum(cluster, hot, "processed") == len(ran)
    assert not any(in_progress_lists(cluster, hot).values())
