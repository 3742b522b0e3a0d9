"""What a sharded worker asks of Redis besides its scripts: the ACL commands it needs, the wake
channels it subscribes to, and the recorded partition counts it follows."""

from __future__ import annotations

from pathlib import Path

import redis

from cogworker.store import shards
from tests.e2e.sharded import worker_support
from tests.e2e.sharded.worker_support import (
    events,
    seed,
    start,
)
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.tls_redis import APP_COMMANDS
from tests.support.workers import WorkerPool

# The shared fixtures, used here by name.
layout = worker_support.layout


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
