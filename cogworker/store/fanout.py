"""Pipelined fan-out over the sharded layout's queue partitions (store/shards.py), for the readers that
look at queues, counters and processes as a whole: the CLI, `status`, `doctor`, the Web UI, the metrics
scrape and the key guard.

The readers are handed the deployment's one client (in the sharded layout, the home slot's). From it,
`clients_of` derives a client per partition slot, with the same options and pool size (a scrape's short
timeouts stay short), pinned like the home one (store/cluster_pool.py), so a MOVED re-pins only that
slot. `pipelined` groups the partitions by the master serving their slots (store/master_routes.py) and
sends one pipeline per master, the masters' pipelines at once from a few threads, then hands back each
partition's replies: a read costs about one round trip however many partitions there are. What a master
didn't run (its reply is a redirect: the slot moved) is sent again through the slot's pinned client.

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
from typing import Any, Generic, TypeVar

import redis
from redis.crc import key_slot

from cogworker.store import keys, master_routes, shards
from cogworker.store.cluster_pool import sibling_client
from cogworker.store.master_routes import REDIRECTS, MasterRoutes, masters
from cogworker.store.shard_clients import SlotClients, slot_of

# Pipelines in flight at once: enough to hide the round trips of a few masters' worth of partitions,
# few enough that a page or a scrape never opens a crowd of connections.
MAX_PARALLEL = 8

# What `build` returns is ignored (a lambda may answer the pipeline it queued on).
Build = Callable[[Any, shards.Partition], object]
Item = TypeVar("Item", shards.Partition, str)


class PartitionClients(SlotClients):
    """The clients for every partition slot, derived from one home client on first use: same options
    and pool size, pinned to the slot (store/cluster_pool.py's sibling_client)."""

    def __init__(self, home: redis.Redis) -> None:
        super().__init__(home)
        self.routes = MasterRoutes(home)

    def _make(self, slot: int, prefix: str | None) -> redis.Redis:
        # A home client that isn't pinned (no cluster: tests of the layout's names on one Redis)
        # reaches every key itself.
        return sibling_client(self.home, slot) or self.home


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


def release(home: redis.Redis) -> None:
    """Close the partition clients derived from `home` (the home client is its owner's to close)."""
    with _derived_lock:
        found = _derived.pop(home, None)
    if found is not None:
        found.close()


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


def record(home: redis.Redis, queue: str, at_least: int = 0) -> int:
    """`shards.record_partitions`, and, when that raised the count of a paused queue, the pause copied
    to the partitions it added (a pause writes the partitions recorded when it runs; one pushed to after
    a raise would otherwise be fetched from). Answers the count recorded."""
    before, count, paused = shards.record_state(home, queue, at_least)
    if paused and count > before:
        added = [shards.Partition(queue, index) for index in range(before, count)]
        pipelined(home, added, lambda pipe, p: pipe.sadd(shards.paused(p), queue))
    return count


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
    """Queue `build(pipe, p)`'s commands for every partition, send one pipeline per master (at once,
    from up to MAX_PARALLEL threads) and answer each partition's replies in order.

    With `raise_on_error=False` a refused command's error comes back in place of its reply; a master that
    can't be reached raises either way (the reader's Redis is unavailable). `transaction=True` wraps each
    partition slot's commands in a MULTI of their own (one pipeline per slot then)."""
    clients = clients_of(home)
    route = _Route(clients, clients.of, slot_of)
    return _fan_out(list(partitions), route, build, raise_on_error, transaction)


def keyed(
    home: redis.Redis,
    names: Sequence[str],
    build: Callable[[Any, str], object],
    *,
    raise_on_error: bool = True,
) -> dict[str, list[Any]]:
    """As `pipelined`, for keys of either kind (a home key's go to the home slot's master). Outside the
    sharded layout: one pipeline on `home`."""
    clients = clients_of(home)
    route = _Route(
        clients, clients.for_key, lambda key: int(key_slot(key.encode("utf-8", "surrogateescape")))
    )
    return _fan_out(list(names), route, build, raise_on_error, False)


def _key_slot(key: str) -> int:
    return int(key_slot(key.encode("utf-8", "surrogateescape")))


@dataclass(frozen=True, slots=True)
class _Route(Generic[Item]):
    clients: PartitionClients
    pinned: Callable[[Item], redis.Redis]  # the item's slot's own client
    slot: Callable[[Item], int]


def _fan_out(
    items: list[Item],
    route: _Route[Item],
    build: Callable[[Any, Item], object],
    raise_on_error: bool,
    transaction: bool,
) -> dict[Item, list[Any]]:
    items = list(dict.fromkeys(items))
    routes = route.clients.routes
    if transaction or not shards.is_sharded() or not routes.usable:
        return _send_all(_by_client(items, route.pinned), build, raise_on_error, transaction)
    by_master: dict[str, list[Item]] = {}
    for item in items:
        owner = routes.owner(route.slot(item))
        by_master.setdefault(owner or "", []).append(item)
    by_master.pop("", None)  # no master mapped: sent through the slot's pinned client below
    groups = [(routes.client(address), members) for address, members in by_master.items()]
    found = _send_all(groups, build, False, False, tolerate=True)
    # Sent again through their slots' pinned clients: what a master didn't run (the slot moved or is
    # moving), what a master that can't be reached may not have run, and what no master was mapped to.
    again = [
        item for item in items if item not in found or any(isinstance(r, REDIRECTS) for r in found[item])
    ]
    if again:
        routes.forget()
        found.update(_send_all(_by_client(again, route.pinned), build, False, False))
    if raise_on_error:
        for item in items:
            error = next((r for r in found[item] if isinstance(r, redis.ResponseError)), None)
            if error is not None:
                raise error
    return found


def _by_client(
    items: list[Item], client_of: Callable[[Item], redis.Redis]
) -> list[tuple[redis.Redis, list[Item]]]:
    groups: dict[int, tuple[redis.Redis, list[Item]]] = {}
    for item in items:
        client = client_of(item)
        groups.setdefault(id(client), (client, []))[1].append(item)
    return list(groups.values())


def _send_all(
    groups: list[tuple[redis.Redis, list[Item]]],
    build: Callable[[Any, Item], object],
    raise_on_error: bool,
    transaction: bool,
    *,
    tolerate: bool = False,
) -> dict[Item, list[Any]]:
    """One pipeline per group, at once; `tolerate`: a group whose client can't be reached is left out of
    the answer (for the caller to send again) instead of raising."""

    def send(group: tuple[redis.Redis, list[Item]]) -> dict[Item, list[Any]]:
        client, members = group
        pipe = client.pipeline(transaction=transaction)
        counts = []
        for item in members:
            before = len(pipe.command_stack)
            build(pipe, item)
            counts.append(len(pipe.command_stack) - before)
        try:
            replies: list[Any] = pipe.execute(raise_on_error=raise_on_error) if pipe.command_stack else []
        except (redis.ConnectionError, redis.TimeoutError):
            if tolerate:
                return {}
            raise
        answered: dict[Item, list[Any]] = {}
        at = 0
        for item, count in zip(members, counts, strict=True):
            answered[item] = replies[at : at + count]
            at += count
        return answered

    found: dict[Item, list[Any]] = {}
    if len(groups) <= 1:
        for group in groups:
            found.update(send(group))
        return found
    # Threads made per call, not kept: a forked worker (the key guard runs in its poller) must never
    # inherit a pool whose threads are gone.
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(groups))) as pool:
        for answered in pool.map(send, groups):
            found.update(answered)
    return found


def master_clients(home: redis.Redis) -> list[tuple[master_routes.Master, redis.Redis]]:
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
