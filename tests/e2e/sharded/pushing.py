"""What the sharded push tests share: the job API configured from the sharded env, and reads of what a
push left in each partition (through redis-py's own cluster client, the tests' independent view)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.api import push_shards
from cogworker.settings import load_settings
from cogworker.store import keys, shards
from tests.support.redis_cluster import RedisCluster


@dataclass(frozen=True)
class _OneSlot:
    """The default layout, bound again after a test (shards' state is the process's)."""

    key_prefix: str = keys.DEFAULT_PREFIX
    cluster_sharding: str = "off"
    queue_partitions: str = ""
    sidekiq_compat: str = "off"
    sidekiq_namespace: str = ""


@contextlib.contextmanager
def configured_api(monkeypatch: pytest.MonkeyPatch, **extra: str) -> Iterator[None]:
    """The job API configured from this process's (sharded) environment plus `extra`; the one-slot
    layout bound again afterwards."""
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    push_shards.forget_recorded()  # each test starts on a flushed cluster
    cw_client.configure(load_settings())
    try:
        yield
    finally:
        cw_client.close()
        shards.use_settings(_OneSlot())


def queued(cluster: redis.RedisCluster, p: shards.Partition) -> list[str]:
    """The jids in partition `p`'s queue list, oldest first."""
    return [str(codec.loads(raw)["jid"]) for raw in reversed(cluster.lrange(shards.queue_key(p), 0, -1))]


def scheduled(cluster: redis.RedisCluster, p: shards.Partition) -> list[str]:
    return [str(codec.loads(raw)["jid"]) for raw in cluster.zrange(shards.schedule(p), 0, -1)]


def master_of(redis_cluster: RedisCluster, p: shards.Partition) -> int:
    """The port of the master serving partition `p`'s slot."""
    return redis_cluster.owner(key_slot(f"{p.queue}#{p.index}".encode()))[0]


def every_key(redis_cluster: RedisCluster) -> list[str]:
    """Every key on every master (nothing written must mean none)."""
    found: list[str] = []
    for port in redis_cluster.ports:
        node = redis_cluster.client(port)
        try:
            if node.info("replication")["role"] == "master":
                found += [str(k) for k in node.keys("*")]
        finally:
            node.close()
    return found
