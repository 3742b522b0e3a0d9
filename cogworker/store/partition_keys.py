"""The key guard's view of the sharded layout (store/shards.py): the families of keys a queue partition
holds, `<prefix>{<queue>#<n>}:<family>`, each with the type the scripts expect, and the partition keys a
pass of the guard checks.

A key is recognised only when its tag parses as a partition's (`shards.partition_of_key`) and its family
is one of cogworker's; anything else under the prefix (a tag of another app's, a family this version
doesn't know) has no expected type, so the guard never touches it. A wrong-type partition key is moved
aside within its own slot (`quarantine_key`), since a rename can't cross slots.
"""

from __future__ import annotations

import datetime as dt
from typing import cast

import redis

from cogworker.store import fanout, keys, shards

# The families named whole (after the partition's tag and its colon).
FAMILIES = {
    "queue": "list",
    "suspects": "list",
    "schedule": "zset",
    "retry": "zset",
    "dead": "zset",
    "deaths": "list",
    "paused": "set",
    "queues": "set",
    # A stopping process's filings handed over in the job's slot (worker/settling/shard_route.py).
    "unsettled": "list",
    # Steps to carry out in other slots after a move here (store/outbox.py).
    "outbox": "hash",
}
# The families with a name after them (an identity, a jid, a digest, a counter's name and day).
PREFIX_FAMILIES = {
    "inprogress:": "list",
    "stat:": "string",
    "orphanings:": "string",
    "orphanings-raw:": "string",
    "pushed:": "string",
    "handed-over:": "string",
    # A cancel's answer kept in the job's partition (ops/cancel_shards.py).
    "cancelled:": "string",
}
QUARANTINE_FAMILY = "quarantine:"


def expected_type(key: str) -> str | None:
    """The type a partition key must have; None for a home key, or a key that isn't cogworker's."""
    partition = shards.partition_of_key(key)
    if partition is None or not key.startswith(partition.prefix):
        return None
    family = key[len(partition.prefix) :]
    if family in FAMILIES:
        return FAMILIES[family]
    for prefix, kind in PREFIX_FAMILIES.items():
        if family.startswith(prefix) and len(family) > len(prefix):
            return kind
    return None


def quarantine_key(key: str, stamp: str) -> str:
    """Where a wrong-type key goes: in its own slot (a partition's quarantine), with a TTL."""
    partition = shards.partition_of_key(key)
    if partition is None:
        return keys.quarantine(f"{key.removeprefix(keys.PREFIX)}:{stamp}")
    return f"{partition.prefix}{QUARANTINE_FAMILY}{key.removeprefix(partition.prefix)}:{stamp}"


def quarantine_pattern() -> str:
    """SCAN pattern for every quarantined record of the deployment, home and partitions alike."""
    return f"{shards.deployment_prefix()}{{*}}:{QUARANTINE_FAMILY}*"


def keys_to_check(home: redis.Redis, queue_names: tuple[str, ...]) -> list[str]:
    """Every partition key a pass checks: each known partition's lists, sets, counters of today and
    in-progress lists (for each identity that may own one). Empty outside the sharded layout."""
    if not shards.is_sharded():
        return []
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    identities: list[str] = []
    if home.type(keys.IN_PROGRESS_IDENTITIES) == "set":
        identities = sorted(str(i) for i in cast(set[str], home.smembers(keys.IN_PROGRESS_IDENTITIES)))
    checked: list[str] = []
    counters = ("processed", "failed", *keys.COUNTED_OUTCOMES)
    for p in fanout.known_partitions(home, queue_names):
        checked += [shards.queue_key(p), shards.suspects(p), *shards.job_sets(p).values()]
        checked += [shards.deaths(p), shards.paused(p), shards.registry(p), p.prefix + "unsettled"]
        checked.append(shards.outbox(p))
        checked += [shards.stat(p, name) for name in counters]
        checked += [shards.stat_day(p, name, day) for name in counters]
        checked += [shards.in_progress(p, identity) for identity in identities]
    return checked
