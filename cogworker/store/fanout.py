"""Pipelined fan-out over the sharded layout's queue partitions (store/shards.py), for the readers that
look at queues, counters and processes as a whole: the CLI, `status`, `doctor`, the Web UI, the metrics
scrape and the key guard.

The readers are handed the deployment's one client (in the sharded layout, the home slot's). From it,
`clients_of` derives a client per partition slot, with the same options and pool size (a scrape's short
timeouts stay short), pinned like the home one (store/cluster_pool.py), so a MOVED re-pins only that
slot. `pipelined` then sends one pipeline per distinct client, the clients' pipelines at once from a few
threads, and hands back each partition's replies: a read costs about one round trip however many
partitions there are.

Outside the sharded layout every partition's client is the given one, so `pipelined` sends exactly one
pipeline, with the commands the one-slot readers always sent; those readers keep their own code path
anyway (each module checks `shards.is_sharded()`), so their command counts don't change.

A general helper: any command queued by `build(pipe, partition)` works, writes included (pause and
resume use it); nothing here knows what the commands are.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from redis.crc import key_slot

from cogworker.cluster_url import hash_tag
from cogworker.store import keys, shards
from cogworker.store.cluster_pool import sibling_client

# Pipelines in flight at once: enough to hide the round trips of a few masters' worth of partitions,
# few enough that a page or a scrape never opens a crowd of connections.
MAX_PARALLEL = 8

# What `build` returns is ignored (a lambda may answer the pipeline it queued on).
Build = Callable[[Any, shards.Partition], object]
Item = TypeVar("Item", shards.Partition, str)


class PartitionClients:
    """The clients for every partition slot, derived from one home client on first use; thread-safe.

    Partitions whose tags hash to the same slot share a client (as store/shard_clients.py does)."""

    def __init__(self, home: redis.Redis) -> None:
        self.home = home
        self._by_slot: dict[int, redis.Redis] = {}
        self._lock = threading.Lock()

    def of(self, partition: shards.Partition) -> redis.Redis:
        if not shards.is_sharded():
            return self.home
        return self.for_slot(slot_of(partition))

    def for_slot(self, slot: int) -> redis.Redis:
        client = self._by_slot.get(slot)
        if client is None:
            with self._lock:
                client = self._by_slot.get(slot)
                if client is None:
                    # A home client that isn't pinned (no cluster: tests of the layout's names on one
                    # Redis) reaches every key itself.
                    client = sibling_client(self.home, slot) or self.home
                    self._by_slot[slot] = client
        return client

    def for_key(self, key: str) -> redis.Redis:
        partition = shards.partition_of_key(key)
        return self.home if partition is None else self.of(partition)


_derived: weakref.WeakKeyDictionary[redis.Redis, PartitionClients] = weakref.WeakKeyDictionary()
_derived_lock = threading.Lock()


def clients_of(home: redis.Redis) -> PartitionClients:
    """The partition clients derived from `home`, made once per home client (a long-lived reader, the
    Web UI or the scrape, keeps its connections)."""
    with _derived_lock:
        found = _derived.get(home)
        if found is None:
            found = _derived[home] = PartitionClients(home)
        return found


def slot_of(partition: shards.Partition) -> int:
    prefix = partition.prefix
    tag = hash_tag(prefix)
    return int(key_slot((tag or prefix).encode("utf-8", "surrogateescape")))


def recorded(home: redis.Redis) -> tuple[list[str], dict[str, int]]:
    """The queue names the home slot knows (its registry, the recorded partition counts, the paused
    intents, the queues processes said lately they read) and each queue's recorded partition count.
    Sharded layout only: one pipeline."""
    pipe = home.pipeline(transaction=False)
    pipe.smembers(keys.QUEUES)
    pipe.hgetall(shards.partitions_key())
    pipe.smembers(keys.PAUSED)
    pipe.zrange(keys.LIVE_QUEUES, 0, -1)
    registry, counts, paused, read = pipe.execute(raise_on_error=False)
    # A registry of the wrong type counts as empty here: `cogworker doctor` names it.
    names = set(registry) if isinstance(registry, set) else set()
    names |= set(paused) if isinstance(paused, set) else set()
    names |= set(read) if isinstance(read, list) else set()
    numbers = counts if isinstance(counts, dict) else {}
    by_queue = {str(q): int(n) for q, n in numbers.items() if str(n).isdigit()}
    return sorted({str(n) for n in names} | set(by_queue)), by_queue


def known_partitions(home: redis.Redis, extra: Iterable[str] = ()) -> list[shards.Partition]:
    """Every partition of every queue the home slot knows and of `extra` (queues processes read):
    max(recorded, configured) of each, so a partition a job was pushed to is never left out."""
    if not shards.is_sharded():
        return []
    names, counts = recorded(home)
    return shards.every_partition(sorted(set(names) | set(extra)), counts)


def pipelined(
    home: redis.Redis,
    partitions: Sequence[shards.Partition],
    build: Build,
    *,
    raise_on_error: bool = True,
    transaction: bool = False,
) -> dict[shards.Partition, list[Any]]:
    """Queue `build(pipe, p)`'s commands for every partition on its slot's client, send one pipeline per
    client (at once, from up to MAX_PARALLEL threads) and answer each partition's replies in order.

    With `raise_on_error=False` a refused command's error comes back in place of its reply; a client that
    can't be reached raises either way (the reader's Redis is unavailable). `transaction=True` wraps each
    client's pipeline in MULTI (its partitions are in one slot, or on one master that owns them all)."""
    clients = clients_of(home)
    return _fan_out(list(partitions), clients.of, build, raise_on_error, transaction)


def keyed(
    home: redis.Redis,
    names: Sequence[str],
    build: Callable[[Any, str], object],
    *,
    raise_on_error: bool = True,
) -> dict[str, list[Any]]:
    """As `pipelined`, for keys of either kind: each key's commands go to its slot's client (a home key's
    to `home`), one pipeline per client. Outside the sharded layout: one pipeline on `home`."""
    clients = clients_of(home)
    return _fan_out(list(names), clients.for_key, build, raise_on_error, False)


def _fan_out(
    items: list[Item],
    client_of: Callable[[Item], redis.Redis],
    build: Callable[[Any, Item], object],
    raise_on_error: bool,
    transaction: bool,
) -> dict[Item, list[Any]]:
    groups: dict[int, tuple[redis.Redis, list[Item]]] = {}
    for item in dict.fromkeys(items):
        client = client_of(item)
        groups.setdefault(id(client), (client, []))[1].append(item)

    def send(group: tuple[redis.Redis, list[Item]]) -> dict[Item, list[Any]]:
        client, members = group
        pipe = client.pipeline(transaction=transaction)
        counts = []
        for item in members:
            before = len(pipe.command_stack)
            build(pipe, item)
            counts.append(len(pipe.command_stack) - before)
        replies: list[Any] = pipe.execute(raise_on_error=raise_on_error) if pipe.command_stack else []
        answered: dict[Item, list[Any]] = {}
        at = 0
        for item, count in zip(members, counts, strict=True):
            answered[item] = replies[at : at + count]
            at += count
        return answered

    found: dict[Item, list[Any]] = {}
    work = list(groups.values())
    if len(work) <= 1:
        for group in work:
            found.update(send(group))
        return found
    # Threads made per call, not kept: a forked worker (the key guard runs in its poller) must never
    # inherit a pool whose threads are gone.
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(work))) as pool:
        for answered in pool.map(send, work):
            found.update(answered)
    return found


@dataclass(frozen=True, slots=True)
class Master:
    """A master of the cluster as CLUSTER SLOTS describes it."""

    address: str  # host:port
    node_id: str
    ranges: tuple[tuple[int, int], ...]  # slot ranges it serves, inclusive
    replicas: tuple[str, ...]  # host:port of each replica CLUSTER SLOTS lists (failed ones are not)

    @property
    def slots(self) -> int:
        return sum(end - start + 1 for start, end in self.ranges)

    def serves(self, slot: int) -> bool:
        return any(start <= slot <= end for start, end in self.ranges)


def masters(home: redis.Redis) -> list[Master]:
    """Every master serving slots, from the node `home` is connected to (CLUSTER SLOTS), by address."""
    reply: list[Any] = home.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
    found: dict[str, tuple[str, list[tuple[int, int]], list[str]]] = {}
    for start, end, master, *replicas in reply:
        address = f"{master[0]}:{master[1]}"
        node_id = str(master[2]) if len(master) > 2 else address
        entry = found.setdefault(address, (node_id, [], []))
        entry[1].append((int(start), int(end)))
        entry[2].extend(f"{r[0]}:{r[1]}" for r in replicas if f"{r[0]}:{r[1]}" not in entry[2])
    return [
        Master(address, node_id, tuple(sorted(ranges)), tuple(replicas))
        for address, (node_id, ranges, replicas) in sorted(found.items())
    ]


def master_clients(home: redis.Redis) -> list[tuple[Master, redis.Redis]]:
    """A client for each master (pinned to the first slot it serves), for what must ask every master:
    a SCAN, an INFO. Outside the sharded layout: `home` alone, with no master named."""
    if not shards.is_sharded():
        return []
    clients = clients_of(home)
    return [(m, clients.for_slot(m.ranges[0][0])) for m in masters(home) if m.ranges]


def scan_all(home: redis.Redis, match: str, count: int = 1000) -> list[str]:
    """Every key matching `match` on every master (sharded layout), or on `home`'s Redis (otherwise)."""
    targets = [client for _, client in master_clients(home)] or [home]
    found: set[str] = set()
    for client in targets:
        found.update(str(k) for k in client.scan_iter(match=match, count=count))
    return sorted(found)
