"""Reading every queue partition's retry, scheduled or dead set in the sharded layout
(COGWORKER_CLUSTER_SHARDING=queues; store/shards.py).

Each partition keeps its own three sets in its own slot, so a reader asks every partition: one
pipeline per partition client, the clients asked at once (a thread each), so a read costs about one
round trip whatever the partition count. Outside the sharded layout nothing here is used: the
readers keep their one-command paths (ops/sets.py checks `shards.is_sharded()` first).

The partition clients are the home client's `ShardClients`, registered with it where the home client
is made (store/lazy_client.py: the CLI and the Web UI); a reader given only the home client finds
them here.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store import keys, shards
from cogworker.store.cluster_pool import SlotUnavailable
from cogworker.store.shard_clients import ShardClients

# Partition clients asked at once. A read is a few small commands each, so threads past the masters'
# count mostly wait on the network: enough for a queue split many ways over a few masters.
FAN_OUT_THREADS = 16

_registry: weakref.WeakKeyDictionary[redis.Redis, ShardClients] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None

Build = Callable[[Any, shards.Partition], None]


def _after_fork() -> None:
    # A forked child has none of the parent's threads: a pool copied over would wait on workers that
    # don't exist there, and the lock may have been held at the fork. The child makes its own.
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def register(home: redis.Redis, settings: SettingsFields) -> ShardClients:
    """The partition clients for `home` (made once; sharded layout only)."""
    with _lock:
        found = _registry.get(home)
        if found is None:
            found = _registry[home] = ShardClients(settings, home=home)
        return found


def adopt(clients_: ShardClients) -> None:
    """Use a process's own partition clients for readers given its home client (a worker, say,
    that has a ShardClients already)."""
    with _lock:
        _registry[clients_.home] = clients_


def release(home: redis.Redis) -> None:
    """Close the partition clients registered with `home` (the home client is its owner's to close)."""
    with _lock:
        found = _registry.pop(home, None)
    if found is not None:
        found.close()


def clients(home: redis.Redis) -> ShardClients:
    found = _registry.get(home)
    if found is None:
        raise RuntimeError(
            "no partition clients registered for this Redis client: in the sharded layout a set reader "
            "needs ops.set_fanout.register(home, settings) or adopt(shard_clients) (store/lazy_client.py "
            "does it for the CLI and the Web UI)"
        )
    return found


def client_of(home: redis.Redis, partition: shards.Partition | None) -> redis.Redis:
    """The client holding `partition`'s keys (the home client outside the sharded layout)."""
    if partition is None or not shards.is_sharded():
        return home
    return clients(home).of(partition)


def partitions(home: redis.Redis) -> list[shards.Partition]:
    """Every partition of every queue known to the home slot, in one round trip, sorted (the merge's
    tie order: entries of equal score list partition by partition in this order)."""
    pipe = home.pipeline(transaction=False)
    pipe.smembers(keys.QUEUES)
    pipe.smembers(keys.PAUSED)
    pipe.hgetall(shards.partitions_key())
    pushed, paused, recorded = pipe.execute()
    names = sorted({str(n) for n in pushed} | {str(n) for n in paused} | {str(n) for n in recorded})
    counts = {str(q): int(n) for q, n in recorded.items() if str(n).isdigit()}
    return sorted(shards.every_partition(names, counts))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(FAN_OUT_THREADS, thread_name_prefix="cogworker-fanout")
        return _pool


def fan_out(
    home: redis.Redis, parts: Sequence[shards.Partition], build: Build, *, raise_on_error: bool = True
) -> list[list[Any]]:
    """Each partition's replies to the commands `build(pipe, partition)` queues, in `parts` order:
    one pipeline per partition client, every client asked at once. For reads only: a pipeline
    refused because its slot moved is sent again once."""
    groups: dict[int, tuple[redis.Redis, list[int]]] = {}
    for index, partition in enumerate(parts):
        client = client_of(home, partition)
        groups.setdefault(id(client), (client, []))[1].append(index)

    def run(client: redis.Redis, members: list[int]) -> list[tuple[int, list[Any]]]:
        for attempt in range(2):
            pipe = client.pipeline(transaction=False)
            spans = []
            for index in members:
                before = len(pipe)
                build(pipe, parts[index])
                spans.append((index, before, len(pipe)))
            try:
                replies = pipe.execute(raise_on_error=raise_on_error) if len(pipe) else []
            except SlotUnavailable:
                # The slot moved (a failover, a reshard): its client is pinned to the new master
                # already, and a read sent again is the same read. Once.
                if attempt:
                    raise
                continue
            return [(index, replies[a:b]) for index, a, b in spans]
        raise AssertionError("unreachable")

    out: list[list[Any]] = [[] for _ in parts]
    work = list(groups.values())
    if len(work) == 1:
        done = [run(*work[0])]
    else:
        futures = [_executor().submit(run, client, members) for client, members in work]
        done = [f.result() for f in futures]
    for group in done:
        for index, replies in group:
            out[index] = replies
    return out
