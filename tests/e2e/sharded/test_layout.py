"""The sharded layout's keys and clients on a real 3-master cluster (store/shards.py, shard_clients.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from cogworker import settings as settings_module
from cogworker.store import keys, shards
from cogworker.store.shard_clients import ShardClients
from tests.e2e.sharded.conftest import PREFIX
from tests.support.redis_cluster import RedisCluster


@pytest.fixture
def layout(env: dict[str, str]) -> Iterator[ShardClients]:
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    clients = ShardClients(loaded)
    yield clients
    clients.close()
    clients.home.close()


def test_home_keys_carry_the_home_tag_and_partitions_their_own(layout: ShardClients) -> None:
    assert keys.PROCESSES == "cw:{home}:processes"
    first, second = shards.Partition("default", 0), shards.Partition("default", 1)
    assert shards.queue_key(first) == "cw:{default#0}:queue"
    assert shards.in_progress(second, "host:1:ab") == "cw:{default#1}:inprogress:host:1:ab"
    assert shards.retry(first) == "cw:{default#0}:retry"
    assert shards.partition_of_key(shards.dead(second)) == second
    assert shards.partition_of_key(keys.PROCESSES) is None


def test_a_partitions_client_writes_where_redis_clusters_own_client_reads(
    layout: ShardClients, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    owners = set()
    for name in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta"):
        partition = shards.Partition(name, 0)
        key = shards.queue_key(partition)
        layout.of(partition).lpush(key, "x")
        assert cluster.lrange(key, 0, -1) == ["x"]
        owners.add(redis_cluster.owner(key_slot(f"{name}#0".encode()))[0])
    # Six queues' slots fall on more than one master: the point of the layout.
    assert len(owners) > 1
    layout.home.sadd(keys.QUEUES, "alpha")
    assert cluster.smembers(keys.QUEUES) == {"alpha"}


def test_the_recorded_partition_count_only_grows(
    layout: ShardClients, monkeypatch: pytest.MonkeyPatch, cluster: redis.RedisCluster
) -> None:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", "default=4")
    shards.use_settings(settings_module.load_settings())
    assert shards.record_partitions(layout.home, "default") == 4
    assert shards.record_partitions(layout.home, "default") == 4  # sent again: the same
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", "2")
    shards.use_settings(settings_module.load_settings())
    assert shards.record_partitions(layout.home, "default") == 4
    recorded = shards.recorded_partitions(layout.home)
    assert recorded == {"default": 4}
    assert [p.index for p in shards.partitions("default", recorded["default"])] == [0, 1, 2, 3]
    assert [p.index for p in shards.push_partitions("default")] == [0, 1]
    assert cluster.smembers(keys.QUEUES) == {"default"}


def test_the_layout_refuses_a_tagged_prefix_and_a_plain_redis(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_KEY_PREFIX", "{cw}:")
    with pytest.raises(settings_module.ConfigError, match="without a hash tag"):
        settings_module.load_settings()
    monkeypatch.setenv("COGWORKER_KEY_PREFIX", PREFIX)
    monkeypatch.setenv("COGWORKER_REDIS_URL", "redis://127.0.0.1:1/0")
    with pytest.raises(settings_module.ConfigError, match="needs a redis\\+cluster://"):
        settings_module.load_settings()
    monkeypatch.setenv("COGWORKER_REDIS_URL", env["COGWORKER_REDIS_URL"])
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", "default=0")
    with pytest.raises(settings_module.ConfigError, match="from 1 to 64"):
        settings_module.load_settings()
