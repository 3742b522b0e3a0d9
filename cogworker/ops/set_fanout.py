"""Reading every queue partition's retry, scheduled or dead set in the sharded layout
(COGWORKER_CLUSTER_SHARDING=queues; store/shards.py), in the shape the set readers use: each
partition's replies in the order asked, partitions sorted as the merge's tie order wants.

The clients and the fan-out are store/fanout.py's: a client per partition slot derived from the home
client the reader was given, one pipeline per master, the masters asked at once, and a read a master
refused because its slot moved sent again through the slot's own client. Outside the sharded layout
nothing here is used: the readers keep their one-command paths (ops/sets.py checks
`shards.is_sharded()` first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from cogworker.store import fanout, shards

Build = fanout.Build


def client_of(home: redis.Redis, partition: shards.Partition | None) -> redis.Redis:
    """The client holding `partition`'s keys (the home client outside the sharded layout)."""
    if partition is None or not shards.is_sharded():
        return home
    return fanout.clients_of(home).of(partition)


def partitions(home: redis.Redis) -> list[shards.Partition]:
    """Every partition of every queue known to the home slot, sorted (the merge's tie order: entries of
    equal score list partition by partition in this order)."""
    return sorted(fanout.known_partitions(home))


def fan_out(
    home: redis.Redis, parts: Sequence[shards.Partition], build: Build, *, raise_on_error: bool = True
) -> list[list[Any]]:
    """Each partition's replies to the commands `build(pipe, partition)` queues, in `parts` order."""
    answered = fanout.pipelined(home, parts, build, raise_on_error=raise_on_error)
    return [answered[p] for p in parts]
