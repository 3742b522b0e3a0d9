"""Clients for the sharded layout (store/shards.py): one per slot a queue partition hashes to.

Each is an ordinary `redis.Redis` pinned to the master owning its partition's slot (cluster_pool.py),
so everything built on one client (scripts, pipelines, the fetch loop's DirectConnection) works per
partition unchanged, and a MOVED reply re-pins only that partition's pool: a failover of one master
stalls only the partitions in its slots. Partitions whose tags hash to the same slot share a client.
Outside the sharded layout every partition gets the deployment's one client.

Built per process after fork, like every client (store/connection.py).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

import redis
from redis.crc import key_slot

from cogworker.cluster_url import hash_tag
from cogworker.settings_fields import SettingsFields
from cogworker.store import shards
from cogworker.store.connection import connect, pinned_client


def slot_of(partition: shards.Partition) -> int:
    """The cluster slot of every key of `partition` (its hash tag's)."""
    prefix = partition.prefix
    tag = hash_tag(prefix)
    return int(key_slot((tag or prefix).encode("utf-8", "surrogateescape")))


class SlotClients(ABC):
    """The home client and one client per partition slot, made on first use by `_make`; thread-safe.
    Partitions whose tags hash to the same slot share a client. Outside the sharded layout every
    partition gets the home client."""

    def __init__(self, home: redis.Redis) -> None:
        self.home = home
        self._by_slot: dict[int, redis.Redis] = {}
        self._lock = threading.Lock()

    def of(self, partition: shards.Partition) -> redis.Redis:
        """The client whose connections reach the master owning `partition`'s slot."""
        if not shards.is_sharded():
            return self.home
        return self.for_slot(slot_of(partition), partition.prefix)

    def for_slot(self, slot: int, prefix: str | None = None) -> redis.Redis:
        """The client for `slot` (`prefix`: a key prefix in it, when the maker needs one)."""
        client = self._by_slot.get(slot)
        if client is None:
            with self._lock:
                client = self._by_slot.get(slot)
                if client is None:
                    client = self._by_slot[slot] = self._make(slot, prefix)
        return client

    @abstractmethod
    def _make(self, slot: int, prefix: str | None) -> redis.Redis:
        """A new client for `slot` (called once per slot, under the lock; it takes no lock of ours)."""

    def for_key(self, key: str) -> redis.Redis:
        """The client for a key of either kind: a partition's, or the home slot's."""
        partition = shards.partition_of_key(key)
        return self.home if partition is None else self.of(partition)

    def close(self) -> None:
        """Close the partition clients (the home client is its owner's to close)."""
        with self._lock:
            clients, self._by_slot = list(self._by_slot.values()), {}
        for client in clients:
            if client is not self.home:
                client.close()


class ShardClients(SlotClients):
    """Partition clients made from the settings, each pinned like the home one (cluster_pool.py)."""

    def __init__(
        self, settings: SettingsFields, *, home: redis.Redis | None = None, extra_timeout_s: float = 0.0
    ) -> None:
        super().__init__(home if home is not None else connect(settings, extra_timeout_s=extra_timeout_s))
        self._settings = settings
        self._extra = extra_timeout_s

    def _make(self, slot: int, prefix: str | None) -> redis.Redis:
        if prefix is None:
            raise ValueError(f"slot {slot}: a client made from the settings is pinned by a key prefix")
        return pinned_client(self._settings, prefix, extra_timeout_s=self._extra)
