"""`cogworker doctor`'s Redis Cluster checks: cluster health for any cluster deployment, and in the
sharded layout (store/shards.py) how the queue partitions spread over the masters.

- cluster slots: CLUSTER INFO says cluster_state ok and every one of the 16384 slots assigned; a slot
  nobody serves holds keys nobody can read or write (FAIL);
- cluster replicas: every master serving slots has a replica (CLUSTER SLOTS lists the live ones):
  without one, a failure of that master leaves its slots down until it is back (WARN);
- sharded layout: the prefix carries no hash tag, and which master holds the home slot;
- partition spread: each master's share of the queue partitions (their slots) and of the jobs waiting
  in them; a WARN when one master holds most of the partitions though there are enough to spread;
- partition counts: a queue whose recorded partition count exceeds the configured one (the setting was
  lowered): readers still drain every recorded partition, pushes use the configured ones (WARN).
All of it read-only, and cheap: CLUSTER INFO, CLUSTER SLOTS, and one LLEN per partition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.crc import key_slot

from cogworker import cluster_url
from cogworker.ops.doctor_check import Check, listed
from cogworker.settings import Settings
from cogworker.store import fanout, master_routes, shards
from cogworker.store.shard_clients import slot_of

SLOTS = 16384


def checks(settings: Settings) -> list[Callable[[redis.Redis, Settings], Check]]:
    """The cluster checks that apply to this deployment (none for a single Redis or Sentinel)."""
    if not cluster_url.is_cluster(settings):
        return []
    found: list[Callable[[redis.Redis, Settings], Check]] = [check_cluster_slots, check_cluster_replicas]
    if shards.is_sharded():
        found += [check_sharded_layout, check_partition_spread, check_partition_counts]
    return found


def check_cluster_slots(client: redis.Redis, settings: Settings) -> Check:
    info: dict[str, Any] = client.cluster("info")
    state = str(info.get("cluster_state", "?"))
    assigned = int(info.get("cluster_slots_assigned", 0))
    pfail, fail = int(info.get("cluster_slots_pfail", 0)), int(info.get("cluster_slots_fail", 0))
    served = f"cluster_state {state}, {assigned} of {SLOTS} slots assigned"
    if state != "ok" or assigned < SLOTS:
        return Check(
            "cluster slots",
            "FAIL",
            f"{served}: keys in a slot no master serves can't be read or written (their queues stall); "
            "assign every slot and fail over or restart the missing master",
        )
    if pfail or fail:
        return Check(
            "cluster slots",
            "WARN",
            f"{served}, {pfail + fail} on a master another node can't reach (pfail {pfail}, fail "
            f"{fail}): its queues stall if it is down",
        )
    masters = master_routes.masters(client)
    return Check("cluster slots", "OK", f"{served}, served by {len(masters)} master(s)")


def check_cluster_replicas(client: redis.Redis, settings: Settings) -> Check:
    masters = master_routes.masters(client)
    lonely = [m for m in masters if not m.replicas]
    if not lonely:
        fewest = min((len(m.replicas) for m in masters), default=0)
        return Check(
            "cluster replicas", "OK", f"each of {len(masters)} master(s) has a replica (at least {fewest})"
        )
    held = _partitions_by_master(client, masters) if shards.is_sharded() else {}
    details = []
    for m in lonely:
        parts = held.get(m.address, [])
        which = f", {len(parts)} queue partition(s): {', '.join(map(str, parts[:5]))}" if parts else ""
        details.append(f"{m.address}: {m.slots} slots{which}")
    return Check(
        "cluster replicas",
        "WARN",
        f"{len(lonely)} of {len(masters)} master(s) without a replica: if one fails, its slots (and the "
        "queues in them) stay down until it is back; add a replica to each",
        listed(details),
    )


def check_sharded_layout(client: redis.Redis, settings: Settings) -> Check:
    prefix = settings.key_prefix
    if cluster_url.hash_tag(prefix) is not None:
        return Check(
            "sharded layout",
            "FAIL",
            f"COGWORKER_KEY_PREFIX {prefix!r} has a hash tag: every key would share its slot; the sharded "
            "layout tags each queue partition itself, so give the prefix none",
        )
    home = int(key_slot(shards.HOME_TAG.encode()))
    owner = next((m.address for m in master_routes.masters(client) if m.serves(home)), "no master")
    return Check(
        "sharded layout",
        "OK",
        f"queues sharded under {prefix!r} (no hash tag); the home slot {home} "
        f"({shards.HOME_TAG}) is on {owner}",
    )


def _partitions_by_master(
    client: redis.Redis, masters: list[master_routes.Master]
) -> dict[str, list[shards.Partition]]:
    held: dict[str, list[shards.Partition]] = {m.address: [] for m in masters}
    for p in fanout.known_partitions(client):
        slot = slot_of(p)
        owner = next((m.address for m in masters if m.serves(slot)), None)
        if owner is not None:
            held[owner].append(p)
    return held


def check_partition_spread(client: redis.Redis, settings: Settings) -> Check:
    masters = master_routes.masters(client)
    held = _partitions_by_master(client, masters)
    total = sum(len(parts) for parts in held.values())
    if not total:
        return Check("partition spread", "OK", "no queue partition yet (nothing pushed)")
    parts = [p for ps in held.values() for p in ps]
    lengths = fanout.pipelined(client, parts, lambda pipe, p: pipe.llen(shards.queue_key(p)))
    waiting_all = sum(int(n) for (n,) in lengths.values()) or 1
    details = []
    for address, mine in sorted(held.items(), key=lambda item: -len(item[1])):
        waiting = sum(int(lengths[p][0]) for p in mine)
        details.append(
            f"{address}: {len(mine)} of {total} partition(s) ({100 * len(mine) / total:.0f} %), "
            f"{waiting} job(s) waiting ({100 * waiting / waiting_all:.0f} %)"
        )
    busiest, most = max(held.items(), key=lambda item: len(item[1]))
    if len(masters) >= 2 and total >= len(masters) and 2 * len(most) > total:
        return Check(
            "partition spread",
            "WARN",
            f"{busiest} holds {len(most)} of the {total} queue partitions: most of the queues' Redis work "
            "lands on one master; split a hot queue (COGWORKER_QUEUE_PARTITIONS) or move slots",
            listed(details),
        )
    return Check(
        "partition spread", "OK", f"{total} queue partition(s) over {len(masters)} master(s)", listed(details)
    )


def check_partition_counts(client: redis.Redis, settings: Settings) -> Check:
    _, recorded = fanout.recorded(client)
    lowered = [
        f"{queue}: {count} recorded, {shards.configured_count(queue)} configured"
        for queue, count in sorted(recorded.items())
        if count > shards.configured_count(queue)
    ]
    if lowered:
        return Check(
            "partition counts",
            "WARN",
            f"{len(lowered)} queue(s) with more partitions recorded than COGWORKER_QUEUE_PARTITIONS "
            "configures here (the setting was lowered, or processes disagree): every recorded partition is "
            "still read and drains; pushes go to the configured ones only",
            listed(lowered),
        )
    return Check("partition counts", "OK", f"{len(recorded)} queue(s), none above its configured count")
