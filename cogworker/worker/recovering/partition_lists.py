"""A live process's in-progress lists in the sharded layout, one per queue partition: the reconcile
(reconcile.lua once per partition) and the read of every list (the reconciler's look for held jobs
requeued while this process was declared dead).

The reconcile squares each partition's list with the jobs this process holds (worker/recovering/
reconcile.py says why). Each partition's list is read first, to declare the keys its entries need;
the script runs only where the read found an entry the process doesn't hold, and is sent only the
digests of held jobs that the read found on that list. Both are exact, not guesses: the fetcher thread
runs the reconcile between fetches, so every job it holds from a partition was on that partition's list
before the read; an entry that lands after the read is a lost fetch reply's, never held, and the
confirming reconcile RECONCILE_CONFIRM_S later finds it. So a reconcile of a process holding nothing
unknown costs one LRANGE per partition and no script.

An entry goes back to the queue of the partition whose list it was on (store/job_keys.py). A partition
whose master doesn't answer, or that the fetcher knows is down (`health`, not waited on), is skipped and
the others reconciled; then PartitionsUnreachable is raised, and the reconciler tries again soon
(FAILED_RETRY_S).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import redis

from cogworker.store import job_keys, shards
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.fetch import Reconciled
from cogworker.worker.recovering.partitions import Health, Known, PartitionScripts
from cogworker.worker.recovering.recovery import (
    ORPHANINGS_TTL_S,
    PERIODIC_RUNNING_TTL_S,
    Recovery,
    suspect_at,
)
from cogworker.worker.recovering.requeue_result import PartitionsUnreachable, RequeueResult

# Jobs filed in dead by a reconcile, and the partition whose dead set holds them
# (Recovery.complete_burials gives them a proper entry).
OnBuried = Callable[[list[str], shards.Partition], None]


class PartitionLists:
    def __init__(
        self,
        clients: ShardClients,
        identity: str,
        queue_names: Iterable[str],
        on_buried: OnBuried | None = None,
        health: Health | None = None,
    ) -> None:
        self.identity = identity
        # The fetcher's view of the partitions whose master is down: the reconcile runs on the fetcher
        # thread, which must never wait on a master it already knows is down.
        self._health = health
        self._clients = clients
        self._scripts = PartitionScripts(clients)
        self._known = Known(clients.home, queue_names)
        self.on_buried = on_buried

    def partitions(self) -> list[shards.Partition]:
        """Read afresh each time (a reconcile is rare: after a failure, or once a check interval): the
        look for requeued jobs must cover every partition the fetcher may have taken a job from, or a
        held job in a partition it missed would look requeued, and be disowned."""
        return self._known.get(fresh=True)

    def contents(self) -> Counter[str]:
        """Every entry of every partition's list of this process, once per copy. Raises when a
        partition doesn't answer (the caller must not take a missing entry for a requeued one)."""
        found: Counter[str] = Counter()
        for partition in self.partitions():
            if self._health is not None and self._health.is_down(partition):
                raise PartitionsUnreachable(
                    f"the in-progress list of {self.identity} in {partition} can't be read "
                    "(its master is down)",
                    RequeueResult(),
                )
            key = shards.in_progress(partition, self.identity)
            found.update(str(raw) for raw in self._clients.of(partition).lrange(key, 0, -1))
        return found

    def run_ids(self) -> set[str]:
        """The run_id of every partition's master now: a held job fetched from a server that is none
        of them (a restart without its data, a failover) was lost with that server's data, not
        requeued (reconcile.py). A master that doesn't answer names none."""
        found: set[str] = set()
        seen: set[int] = set()
        for partition in self.partitions():
            if self._health is not None and self._health.is_down(partition):
                continue
            client = self._clients.of(partition)
            if id(client) in seen:
                continue
            seen.add(id(client))
            try:
                run_id = client.info("server").get("run_id")
            except redis.RedisError:
                continue
            if run_id:
                found.add(str(run_id))
        return found

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        held_digests = Counter(job_keys.digest(raw) for raw in held)
        failed_digests = Counter(job_keys.digest(raw) for raw in failed)
        total = Reconciled()
        unreachable: list[str] = []
        for partition in self.partitions():
            if self._health is not None and self._health.is_down(partition):
                unreachable.append(str(partition))
                continue
            try:
                self._reconcile_partition(partition, held_digests, failed_digests, max_orphanings, total)
            except redis.ConnectionError as exc:
                unreachable.append(str(partition))
                if self._health is not None:
                    self._health.failed(partition, exc)
        if unreachable:
            raise PartitionsUnreachable(
                f"the in-progress lists of {self.identity} in {', '.join(unreachable)} could not be "
                "reconciled (their master did not answer); the others were",
                RequeueResult(moved=total.requeued),
            )
        return total

    def _reconcile_partition(
        self,
        partition: shards.Partition,
        held: Counter[str],
        failed: Counter[str],
        max_orphanings: int,
        total: Reconciled,
    ) -> None:
        client, scripts = self._scripts.of(partition)
        list_key = shards.in_progress(partition, self.identity)
        declared = job_keys.Declared()
        for _ in range(job_keys.MAX_PASSES):
            raws = [str(raw) for raw in client.lrange(list_key, 0, -1)]
            on_list = Counter(job_keys.digest(raw) for raw in raws)
            if not on_list - held:
                return  # every entry is held: nothing to put back
            declared.add_jobs(raws, partition.queue)
            job_key_list, job_key_args = declared.keys_and_args(partition)
            held_here, failed_here = held & on_list, failed & on_list
            args: list[Any] = [
                partition.queue,
                ORPHANINGS_TTL_S,
                max_orphanings,
                PERIODIC_RUNNING_TTL_S,
                int(time.time()),
                suspect_at(max_orphanings),
                *job_key_args,
                held_here.total(),
                *held_here.elements(),
                *failed_here.elements(),
            ]
            reply = scripts.run(
                "reconcile",
                [list_key, shards.dead(partition), shards.registry(partition), *job_key_list],
                args,
                client=client,
            )
            n_wrong, left, n_needs = int(reply[2]), int(reply[3]), int(reply[4])
            needs_at = 5 + n_wrong
            total.requeued += int(reply[0])
            total.kept += int(reply[1])
            total.wrong_type_keys += [
                str(k) for k in reply[5:needs_at] if str(k) not in total.wrong_type_keys
            ]
            buried = [str(raw) for raw in reply[needs_at + 2 * n_needs :]]
            total.buried += buried
            if buried and self.on_buried is not None:
                self.on_buried(buried, partition)
            if not left:
                return
            total.kept -= int(reply[1])  # counted again by the next pass
            declared.add_needs(reply[needs_at : needs_at + 2 * n_needs])


def own_lists(
    recovery: Recovery, identity: str, queue_names: Iterable[str], health: Health | None
) -> PartitionLists | None:
    """This process's in-progress lists, one per partition, for its reconciler (sharded layout; None in
    the one-slot one). `health`: the fetcher's view of the partitions that are down. Buried jobs get
    their proper dead entry from `recovery`."""
    if recovery.sharded is None:
        return None
    return PartitionLists(recovery.sharded.clients, identity, queue_names, recovery.complete_burials, health)
