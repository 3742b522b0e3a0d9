"""What the sharded periodic tests share (test_periodic.py, test_periodic_faults.py): workers running
tests/apps/sharded_periodic.py's every-second entry, its runs as the job recorded them (a file outside
the cluster), and queues placed on a master other than the home slot's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from cogworker.store import keys, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import master_of, queued
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import Worker, WorkerPool

NAME = "sharded-tick"
QUICK = {"COGWORKER_POLL_INTERVAL_S": "0.3", "COGWORKER_PERIODIC_CHECK_INTERVAL_S": "0.2"}


@dataclass(frozen=True)
class Run:
    entry: str
    slot: int
    jid: str
    pid: int


def home_master(redis_cluster: RedisCluster) -> int:
    return redis_cluster.owner(key_slot(b"home"))[0]


def queues_off_home(redis_cluster: RedisCluster) -> tuple[str, str]:
    """Two queues whose partition 0 is served by two different masters, neither the home slot's."""
    home = home_master(redis_cluster)
    found: dict[int, str] = {}
    for name in (f"pq{i}" for i in range(100)):
        port = master_of(redis_cluster, shards.Partition(name))
        if port != home:
            found.setdefault(port, name)
    first, second = list(found.values())[:2]
    return first, second


def start(
    workers: WorkerPool, redis_cluster: RedisCluster, out: Path, reads: str, entry_queue: str, **extra: str
) -> Worker:
    """A sharded worker reading `reads`, with the entry NAME (or SHARDED_PERIODIC_NAME) on `entry_queue`."""
    env = {
        **sharded_env(redis_cluster),
        "COGWORKER_REQUIRE": "sharded_periodic",
        "COGWORKER_QUEUES": reads,
        "COGWORKER_LOG_LEVEL": "info",
        "SHARDED_TEST_OUT": str(out),
        "SHARDED_PERIODIC_QUEUE": entry_queue,
        **QUICK,
        **extra,
    }
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def runs(out: Path) -> list[Run]:
    text = out.read_text() if out.exists() else ""
    return [Run(e, int(s), j, int(p)) for e, s, j, p in (line.split() for line in text.splitlines())]


def slot_counts(out: Path, entry: str = NAME) -> Counter[int]:
    return Counter(run.slot for run in runs(out) if run.entry == entry)


def queued_anywhere(cluster: redis.RedisCluster, queue: str, count: int) -> set[str]:
    return {jid for i in range(count) for jid in queued(cluster, shards.Partition(queue, i))}


def claimed_jid(cluster: redis.RedisCluster, name: str, slot: int) -> str | None:
    """The jid the slot's claim key holds (the job its script pushed), under the bound layout's home."""
    value = cluster.get(keys.periodic_slot(name, slot))
    return None if value is None else str(value)
