"""The swarm's Prometheus scrape in the sharded layout, on a real 3-master cluster: queue sizes, latency,
paused flags and the retry/scheduled/dead sizes summed over every partition (supervisor/integrations/
metrics_redis.py, through store/fanout.py), and read again after a partition's master fails over."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from cogworker.settings import load_settings
from cogworker.store import keys, shards
from supervisor.integrations.metrics import SwarmMetrics
from tests.support.metrics import scrape, value
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import free_port, wait_until


@pytest.fixture
def served(env: dict[str, str], cluster: redis.RedisCluster) -> Iterator[SwarmMetrics]:
    metrics = SwarmMetrics(load_settings(metrics_port=free_port()))
    metrics.start()
    try:
        yield metrics
    finally:
        metrics.stop()


def seed(cluster: redis.RedisCluster, queue: str, ages: list[list[float]]) -> None:
    """Partition i of `queue` holds one job per age in ages[i] (seconds waited so far)."""
    now = time.time()
    cluster.sadd(keys.QUEUES, queue)
    cluster.hset(shards.partitions_key(), queue, len(ages))
    for index, waits in enumerate(ages):
        for n, age in enumerate(waits):
            job = {"jid": f"{queue}-{index}-{n}", "queue": queue, "enqueued_at": now - age}
            cluster.lpush(shards.queue_key(shards.Partition(queue, index)), json.dumps(job))


def test_the_scrape_sums_queues_and_sets_over_partitions(
    served: SwarmMetrics, cluster: redis.RedisCluster
) -> None:
    seed(cluster, "reports", [[5, 1], [60], [], [20, 2, 1]])
    seed(cluster, "default", [[3]])
    for index in range(3):
        p = shards.Partition("reports", index)
        cluster.zadd(shards.retry(p), {f"r{index}": 1.0})
        cluster.zadd(shards.schedule(p), {f"s{index}-{n}": 1.0 for n in range(index + 1)})
    cluster.zadd(shards.dead(shards.Partition("default", 0)), {"d": 1.0})
    for index in range(4):
        cluster.sadd(shards.paused(shards.Partition("reports", index)), "reports")
    assert served.port is not None
    samples = scrape(served.port)
    assert value(samples, "cogworker_redis_up") == 1
    assert value(samples, "cogworker_queue_size", queue="reports") == 6
    assert value(samples, "cogworker_queue_size", queue="default") == 1
    # The longest wait at any partition's next-popped end.
    assert 59 < (value(samples, "cogworker_queue_latency_seconds", queue="reports") or 0) < 70
    assert value(samples, "cogworker_queue_paused", queue="reports") == 1
    assert value(samples, "cogworker_queue_paused", queue="default") == 0
    assert value(samples, "cogworker_set_size", set="retry") == 3
    assert value(samples, "cogworker_set_size", set="scheduled") == 6
    assert value(samples, "cogworker_set_size", set="dead") == 1


def test_the_scrape_reads_a_partition_again_after_its_master_fails_over(
    served: SwarmMetrics, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    seed(cluster, "reports", [[1, 1], [1]])
    assert served.port is not None
    port = served.port
    assert value(scrape(port), "cogworker_queue_size", queue="reports") == 3
    redis_cluster.failover(key_slot(b"reports#0"))
    cluster.lpush(shards.queue_key(shards.Partition("reports", 0)), json.dumps({"jid": "after"}))
    # The first scrape after may meet the MOVED (redis_up 0, never a failed scrape); a later one re-pins.
    wait_until(
        lambda: value(scrape(port), "cogworker_queue_size", queue="reports") == 4,
        timeout=20,
        interval=0.2,
        message="the scrape to read the failed-over partition",
    )
