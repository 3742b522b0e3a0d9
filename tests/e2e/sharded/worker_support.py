"""What the sharded worker tests share (test_worker_path.py, test_worker_outage.py, test_worker_access.py):
jobs seeded as a pusher of the layout writes them (the payload LPUSHed onto the partition's queue key,
the queue added to the home registry), workers of the sharded deployment, and reads of what they left.
tests/apps/sharded_jobs.py records each run in a file, outside the cluster under test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api.payload import build
from cogworker.store import keys, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import WorkerPool


@pytest.fixture
def layout(env: dict[str, str]) -> Iterator[None]:
    """This (the test's) process names keys as the sharded deployment does; the one-slot layout after."""
    shards.use_settings(settings_module.load_settings())
    yield
    one_slot()


# Each job's retry option, as its client writes it in the payload (@job(retry=...)).
RETRY: dict[str, bool | int] = {"mark": True, "fails": 2, "dies": False, "amark": False}


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
