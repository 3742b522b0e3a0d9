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

import redis

from cogworker.store import job_keys, shards
from cogworker.store.scripts import Scripts
from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import Reconciled, digest
from cogworker.worker.recovering.recovery import ORPHANINGS_TTL_S, PERIODIC_RUNNING_TTL_S, suspect_at


class PartitionDeclared(job_keys.Declared):
    """job_keys.Declared naming its keys in one partition's slot."""

    def __init__(self, partition: Partition) -> None:
        super().__init__()
        self.partition = partition

    def keys_and_args(self) -> tuple[list[str], list[str | int]]:
        p = self.partition
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
