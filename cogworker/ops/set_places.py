"""Where an entry of the sharded layout's retry, scheduled or dead sets lives, for the actions
(ops/set_actions.py): the client of its partition's slot, entries grouped by partition, and a key of
the wrong type reported from there. Outside the sharded layout every entry's partition is None and
each answer is the one-slot layout's (the home client, one group)."""

from __future__ import annotations

import redis

from cogworker.ops import set_fanout
from cogworker.ops.sets import Entry
from cogworker.store.shards import Partition


def holder(client: redis.Redis, entry: Entry) -> redis.Redis:
    """The client of the slot holding `entry`: its partition's (sharded layout), else `client`."""
    return set_fanout.client_of(client, entry.partition)


def by_partition(chosen: list[Entry]) -> list[list[Entry]]:
    """`chosen` split by the partition holding each (one group, in order, outside the sharded layout)."""
    groups: dict[Partition | None, list[Entry]] = {}
    for entry in chosen:
        groups.setdefault(entry.partition, []).append(entry)
    return list(groups.values())
