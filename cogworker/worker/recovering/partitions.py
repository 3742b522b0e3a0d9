"""The queue partitions a sharded deployment's recovery and pollers cover (COGWORKER_CLUSTER_SHARDING=queues).

A process keeps one in-progress list per (process, partition), in the partition's slot
(`shards.in_progress`), so whoever puts a process's jobs back (orphan recovery, the supervisor's
immediate requeue, a reconcile, a clean stop) and whoever moves due schedule and retry entries (the
poller) goes over every partition of every queue, one single-slot script per partition. Every queue:
the home registry (keys.QUEUES, which every push adds to), the recorded partition counts (which only
grow), and the queues this process reads. Each partition with max(recorded, configured) partitions
(`shards.every_partition`), so no partition a job was pushed to goes unread.

Outside the sharded layout none of this is used: the one-slot layout keeps its one-list, one-script
paths and their command counts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Protocol

import redis

from cogworker.store import keys, shards
from cogworker.store.scripts import Scripts
from cogworker.store.shard_clients import ShardClients


class Health(Protocol):
    """Which partitions' masters are known not to answer (worker/fetching/partition_health.py): skipped
    without waiting on them, and told of a failure, so the fetcher skips them too and a probe watches
    for their return."""

    def is_down(self, partition: shards.Partition) -> bool: ...
    def failed(self, partition: shards.Partition, exc: BaseException) -> None: ...


# How long a list of partitions read from the home slot is used before it is read again: a queue
# pushed for the first time (or given more partitions) is covered this soon.
REFRESH_S = 5.0


def known(home: redis.Redis, queue_names: Iterable[str]) -> list[shards.Partition]:
    """Every partition of every queue the deployment has recorded, and of `queue_names` (the queues
    this process reads, which may not have been pushed to yet). Two reads of the home slot."""
    registry = {str(name) for name in home.smembers(keys.QUEUES)}
    recorded = shards.recorded_partitions(home)
    names = sorted(registry | set(queue_names) | set(recorded))
    return shards.every_partition(names, recorded)


class Known:
    """`known`, read again at most every REFRESH_S seconds (the poller looks at every partition once a
    second: it must not read the registry as often). A failed read keeps the last answer."""

    def __init__(self, home: redis.Redis, queue_names: Iterable[str]) -> None:
        self._home = home
        self._names = tuple(queue_names)
        self._partitions: list[shards.Partition] = []
        self._read_at = -REFRESH_S

    def get(self, *, fresh: bool = False) -> list[shards.Partition]:
        now = time.monotonic()
        if fresh or now - self._read_at >= REFRESH_S or not self._partitions:
            try:
                self._partitions = known(self._home, self._names)
            except redis.RedisError:
                if not self._partitions:
                    raise
            else:
                self._read_at = now
        return self._partitions


class PartitionScripts:
    """The scripts bound to each partition's client (clients are shared by the partitions of a slot)."""

    def __init__(self, clients: ShardClients) -> None:
        self.clients = clients
        self._by_client: dict[int, Scripts] = {}

    def of(self, partition: shards.Partition) -> tuple[redis.Redis, Scripts]:
        client = self.clients.of(partition)
        scripts = self._by_client.get(id(client))
        if scripts is None:
            scripts = self._by_client[id(client)] = Scripts(client)
        return client, scripts

    def forget(self) -> None:
        """After ShardClients.close(): the clients are made again on next use."""
        self._by_client.clear()


def is_alive(home: redis.Redis, identity: str, silent_for_s: float) -> bool:
    """requeue.lua's death check, in the home slot where a process's presence and beats are kept: it
    is alive while its presence key stands or its last beat is at most `silent_for_s` old on Redis's
    clock. One round trip. The sharded recovery asks this before each partition's requeue: the check
    can't be in the same script as the move (a partition's slot can't read the home slot), so a
    process that comes back to life within that round trip may have a job it fetched just then run
    twice, the duplicate the one-slot layout allows for any process declared dead (docs/sharding.md)."""
    pipe = home.pipeline(transaction=False)
    pipe.exists(keys.process(identity))
    pipe.hget(keys.LAST_BEAT, identity)
    pipe.time()
    present, last, (seconds, micros) = pipe.execute()
    if present:
        return True
    try:
        stamp = float(last) if last is not None else None
    except ValueError:
        stamp = None  # not a number: counts as none, as in requeue.lua
    return stamp is not None and int(seconds) + int(micros) / 1e6 - stamp <= silent_for_s


def scan_lists(
    clients: ShardClients, partitions: Iterable[shards.Partition]
) -> dict[str, set[shards.Partition]]:
    """In-progress lists found by a keyspace SCAN of every master that holds one of `partitions`
    (identity -> the partitions it has a list in), for lists no registry names: an identity missing
    from keys.IN_PROGRESS_IDENTITIES, or a partition of a queue missing from the registry. A master
    that doesn't answer is skipped (the periodic recovery covers the registered lists)."""
    by_node: dict[tuple[str, int] | int, redis.Redis] = {}
    for known_partition in partitions:
        client = clients.of(known_partition)
        owner = getattr(client.connection_pool, "slot_owner", None)
        try:
            node: tuple[str, int] | int = owner.address() if owner is not None else id(client)
        except redis.RedisError:
            continue
        by_node.setdefault(node, client)
    pattern = _glob_escape(shards.deployment_prefix()) + "{*}:inprogress:*"
    found: dict[str, set[shards.Partition]] = {}
    for client in by_node.values():
        try:
            for key in client.scan_iter(match=pattern, count=500):
                partition = shards.partition_of_key(str(key))
                if partition is None:
                    continue
                identity = str(key).removeprefix(partition.prefix + "inprogress:")
                found.setdefault(identity, set()).add(partition)
        except redis.RedisError:
            continue
    return found


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
