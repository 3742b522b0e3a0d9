"""reconcile.lua on one partition's in-progress list (sharded layout; fetch.py says what a reconcile
is for). The script is the one-slot layout's; only the keys it is given are the partition's: its list
for this process, its dead set, its queue registry, and the per-job keys of store/job_keys.py named in
the partition's slot. A job on a partition's list belongs to that partition's queue, so the only queue
declared is the partition's own. Keys outside the slot (a periodic entry's running lock, in the home
slot) are never declared: periodic jobs are refused in this layout, and an entry needing one stays on
the list, reported as kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from cogworker.store import job_keys, shards
from cogworker.store.scripts import Scripts
from cogworker.store.shard_clients import ShardClients
from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import Reconciled, digest
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.recovering.recovery import ORPHANINGS_TTL_S, PERIODIC_RUNNING_TTL_S, suspect_at


class PartitionDeclared(job_keys.Declared):
    """job_keys.Declared naming its keys in one partition's slot."""

    def __init__(self, partition: Partition) -> None:
        super().__init__()
        self.partition = partition

    def keys_and_args(self, partition: Partition | None = None) -> tuple[list[str], list[str | int]]:
        p = partition or self.partition
        queues = [p.queue] if p.queue in self.queues else []
        jids, digests = sorted(self.jids), sorted(self.digests)
        declared = [
            *(key for _q in queues for key in (shards.queue_key(p), shards.suspects(p))),
            *(shards.orphanings(p, j) for j in jids),
            *(shards.orphanings_raw(p, d) for d in digests),
        ]
        counts: list[str | int] = [len(queues), len(jids), 0, len(digests)]
        return declared, [*counts, *queues, *jids, *digests]


def reconcile_partition(
    client: redis.Redis,
    scripts: Scripts,
    partition: Partition,
    identity: str,
    held: list[str],
    failed: list[str],
    max_orphanings: int,
) -> Reconciled:
    listed = shards.in_progress(partition, identity)
    held_digests = [digest(raw) for raw in held]
    failed_digests = [digest(raw) for raw in failed]
    declared = PartitionDeclared(partition)
    total = Reconciled()
    for _ in range(job_keys.MAX_PASSES):
        declared.add_jobs([str(raw) for raw in client.lrange(listed, 0, -1)], partition.queue)
        job_key_list, job_key_args = declared.keys_and_args()
        args: list[str | int] = [
            partition.queue,
            ORPHANINGS_TTL_S,
            max_orphanings,
            PERIODIC_RUNNING_TTL_S,
            int(time.time()),
            suspect_at(max_orphanings),
            *job_key_args,
            len(held_digests),
            *held_digests,
            *failed_digests,
        ]
        reply = scripts.run(
            "reconcile",
            [listed, shards.dead(partition), shards.registry(partition), *job_key_list],
            args,
            client=client,
        )
        n_wrong, left, n_needs = int(reply[2]), int(reply[3]), int(reply[4])
        needs_at = 5 + n_wrong
        total.requeued += int(reply[0])
        total.kept = int(reply[1])
        total.wrong_type_keys = [str(k) for k in reply[5:needs_at]]
        total.buried += [str(raw) for raw in reply[needs_at + 2 * n_needs :]]
        if not left:
            break
        declared.add_needs(reply[needs_at : needs_at + 2 * n_needs])
    return total


@dataclass(frozen=True, slots=True)
class Every:
    """A process's partitions and what reaches them."""

    partitions: list[Partition]
    clients: ShardClients
    scripts: Scripts
    identity: str
    health: PartitionHealth


def reconcile_every(every: Every, held: list[str], failed: list[str], max_orphanings: int) -> Reconciled:
    """Each partition's list reconciled. A partition whose master is down is left for the next
    reconcile, which the error raised here makes due soon (the others are done first)."""
    total = Reconciled()
    skipped: list[Partition] = []
    for partition in every.partitions:
        if every.health.is_down(partition):
            skipped.append(partition)
            continue
        client = every.clients.of(partition)
        try:
            one = reconcile_partition(
                client, every.scripts, partition, every.identity, held, failed, max_orphanings
            )
        except redis.ConnectionError as exc:
            every.health.failed(partition, exc)
            skipped.append(partition)
            continue
        total.requeued += one.requeued
        total.kept += one.kept
        total.wrong_type_keys += one.wrong_type_keys
        total.buried += one.buried
    if skipped:
        raise redis.ConnectionError(f"partitions not reconciled (master unavailable): {skipped}")
    return total


def list_every(every: Every) -> list[str]:
    """Every entry of the process's in-progress lists. All or nothing: a partition left out would make
    its held jobs look requeued elsewhere (reconcile.py disowns those)."""
    found: list[str] = []
    for partition in every.partitions:
        client = every.clients.of(partition)
        try:
            listed = client.lrange(shards.in_progress(partition, every.identity), 0, -1)
        except redis.ConnectionError as exc:
            every.health.failed(partition, exc)
            raise
        found += [str(raw) for raw in listed]
    return found
