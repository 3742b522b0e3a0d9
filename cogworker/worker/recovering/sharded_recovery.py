"""Orphan recovery, the supervisor's immediate requeue and a clean stop's requeue in the sharded layout.

A process keeps one in-progress list per queue partition, in that partition's slot
(`shards.in_progress(p, identity)`); the home set keys.IN_PROGRESS_IDENTITIES still lists identities.
Putting a process's jobs back is requeue.lua run once per partition whose list holds any, each run
given that partition's keys only (its queue, suspects list, dead set, orphan counters), on the client
pinned to that partition's master. A job goes back to the partition it was taken from.

What requeue.lua checked in the same step as the move and can't here, because it lives in the home slot:
- the owner's death: asked of the home slot (`partitions.is_alive`) before the first list is read and
  again right before each partition's requeue, which then runs as "known dead". A process that comes
  back to life inside that round trip may have a job it fetched just then run twice: the duplicate the
  one-slot layout allows for any process declared dead, in a window of one round trip;
- whether a live process reads the queue: asked of the home keys.LIVE_QUEUES after the move;
- `cogworker.cancel`'s record: not seen by the script here, so a job cancelled while its process died
  is requeued; the worker that fetches it finds the cancel (worker/running/cancelled.py) and doesn't run
  it, and a batch member's end unrun is then counted through the partition's outbox like any other;
- a requeued batch member's `hold:run:<jid>` on its batch: the script writes a `batch_hold` entry in
  the partition's outbox for each member it took off the list, moved here at once (`move_holds`; a
  worker's sweep moves one left by a recovery that died) and applied in the home slot
  (store/batch_ends.py `apply_hold`).

A death convicts only a job that was alone: alone over every partition's list of the owner, counted
before the first requeue, not alone on one partition's list.

A partition whose master doesn't answer is skipped and the others are requeued; the caller then gets
PartitionsUnreachable (orphan recovery tries again at its next check, the supervisor retries), and the
identity stays registered until every partition's list for it is read empty.
"""

from __future__ import annotations

from typing import Protocol

import redis
import structlog

from cogworker.store import job_keys, key_guard, keys, outbox, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.recovering.partitions import Known, PartitionScripts, is_alive, scan_lists
from cogworker.worker.recovering.requeue_result import ListKeys, PartitionsUnreachable, RequeueResult


class ListRequeuer(Protocol):
    """What this module uses of Recovery (recovery.py): the one-slot layout's requeue of one list,
    given a partition's keys."""

    def requeue_list(
        self,
        where: ListKeys,
        identity: str,
        if_dead_for: float | None,
        count_orphans: bool,
        *,
        shared: bool = False,
    ) -> RequeueResult: ...


log = structlog.get_logger("cogworker.recovery")


class ShardedRecovery:
    """The sharded half of Recovery (recovery.py), made by it when the layout is on."""

    def __init__(self, recovery: ListRequeuer, ctx: RedisContext, clients: ShardClients | None) -> None:
        self._recovery = recovery
        self._home = ctx.client
        self._settings = ctx.settings
        self.clients = clients if clients is not None else ShardClients(ctx.settings, home=ctx.client)
        self.scripts = PartitionScripts(self.clients)
        self._known = Known(self._home, ctx.settings.queue_spec.names)
        # Partitions a keyspace scan found an identity's list in that no registry names (scan()).
        self._scanned: dict[str, set[shards.Partition]] = {}
        # Identities whose last requeue here left some partitions for later after seeing several jobs.
        self._partial: set[str] = set()

    def list_keys(self, partition: shards.Partition, identity: str) -> ListKeys:
        """requeue.lua's fixed keys for `identity`'s list in `partition`: the home slot's presence,
        beats, registry, live queues and cancels are out of reach, so the script is given keys of the
        partition's slot in their place that nothing writes (the death check is not asked of it) or,
        for the registry, the partition's own (shards.registry)."""
        client, scripts = self.scripts.of(partition)
        return ListKeys(
            client,
            scripts,
            shards.in_progress(partition, identity),
            job_keys.stand_in(partition, "process", identity),
            job_keys.stand_in(partition, "last-beat", "all"),
            shards.dead(partition),
            shards.registry(partition),
            job_keys.stand_in(partition, "live-queues", "all"),
            job_keys.stand_in(partition, "cancels", "all"),
            default_queue=partition.queue,
            partition=partition,
        )

    def partitions_of(self, identity: str) -> list[shards.Partition]:
        """Read afresh (only for an identity found dead): a partition first pushed to a moment ago
        must not be missed, or forget_if_empty would drop an identity whose list there holds jobs."""
        known = self._known.get(fresh=True)
        extra = self._scanned.get(identity, set()) - set(known)
        return [*known, *sorted(extra)]

    def requeue(self, identity: str, *, if_dead_for: float | None, count_orphans: bool) -> RequeueResult:
        total = RequeueResult()
        if if_dead_for is not None and is_alive(self._home, identity, if_dead_for):
            total.alive = True
            return total
        unreachable: list[str] = []
        sizes: dict[shards.Partition, int] = {}
        for partition in self.partitions_of(identity):
            try:
                sizes[partition] = int(
                    self.clients.of(partition).llen(shards.in_progress(partition, identity))
                )
            except redis.ResponseError as exc:
                self._wrong_type(partition, identity, exc)
                unreachable.append(str(partition))
            except redis.RedisError:
                unreachable.append(str(partition))
        # Alone over all of the owner's lists: a job alone in one partition shared the death with the
        # jobs of the others. A list that couldn't be read, or an earlier requeue here that moved some
        # lists and not others, may hide the others: then nobody is alone.
        shared = sum(sizes.values()) > 1 or bool(unreachable) or identity in self._partial
        moved_queues: set[str] = set()
        for partition, size in sizes.items():
            if size == 0:
                continue
            try:
                if if_dead_for is not None and is_alive(self._home, identity, if_dead_for):
                    total.alive = True  # it came back: what earlier partitions moved stands
                    return total
                result = self._recovery.requeue_list(
                    self.list_keys(partition, identity), identity, None, count_orphans, shared=shared
                )
            except redis.ResponseError as exc:
                self._wrong_type(partition, identity, exc)
                unreachable.append(str(partition))
                continue
            except redis.RedisError:
                unreachable.append(str(partition))
                continue
            merge(total, result)
            if result.moved:
                moved_queues.add(partition.queue)
        total.unlisted = self._unread(identity, moved_queues)
        if unreachable and shared:
            self._partial.add(identity)
        elif not unreachable:
            self._partial.discard(identity)
        if unreachable:
            raise PartitionsUnreachable(
                f"the in-progress lists of {identity} in {', '.join(unreachable)} could not be requeued "
                "(their master did not answer, or a key has the wrong type); the others were",
                total,
            )
        return total

    def move_holds(self, partition: shards.Partition, ids: list[str]) -> None:
        """Move the `batch_hold` entries a requeue of `partition`'s list wrote (an id it didn't write
        is skipped). Best-effort: an entry left is moved by a worker's sweep."""
        if not ids:
            return
        try:
            outbox.Mover(self.clients, self._settings).move_ids(partition, ids)
        except redis.RedisError as exc:
            log.warning("batch_hold_release_deferred", partition=str(partition), error=str(exc),
                        note="left in the partition's outbox for a worker's sweep")  # fmt: skip

    def _wrong_type(self, partition: shards.Partition, identity: str, exc: redis.ResponseError) -> None:
        if not key_guard.is_wrong_type(exc):
            raise exc
        log.error(
            "orphan_check_stopped_by_wrong_type_key", owner=identity, partition=str(partition), error=str(exc)
        )
        key_guard.request(self._home, shards.in_progress(partition, identity))

    def _unread(self, identity: str, queues: set[str]) -> list[str]:
        """Queues jobs went back to that no live process has said it reads lately (keys.LIVE_QUEUES, in
        the home slot): added to the home registry and logged, as requeue.lua does in the one-slot
        layout. Best-effort: the jobs are back on their queues either way."""
        if not queues:
            return []
        names = sorted(queues)
        try:
            pipe = self._home.pipeline(transaction=False)
            for name in names:
                pipe.zscore(keys.LIVE_QUEUES, name)
            pipe.time()
            *scores, (seconds, _) = pipe.execute()
            window = 2 * self._settings.presence_ttl_s
            unread = [
                n
                for n, at in zip(names, scores, strict=True)
                if at is None or float(at) < int(seconds) - window
            ]
            if unread:
                self._home.sadd(keys.QUEUES, *unread)
                log.warning(
                    "requeued_onto_unread_queues",
                    owner=identity,
                    queues=unread,
                    note="no live process has read these queues lately: make sure some worker reads them",
                )
        except redis.RedisError:
            return []
        return unread

    def all_empty(self, identity: str) -> bool:
        """Every partition's list for `identity` is empty (read now); False if one doesn't answer."""
        for partition in self.partitions_of(identity):
            try:
                if self.clients.of(partition).llen(shards.in_progress(partition, identity)):
                    return False
            except redis.RedisError:
                return False
        self._scanned.pop(identity, None)
        return True

    def scan(self) -> set[str]:
        """The identities whose lists a keyspace scan of every master holding a partition finds."""
        self._scanned = scan_lists(self.clients, self._known.get(fresh=True))
        return set(self._scanned)

    def close(self) -> None:
        """Disconnect every partition's client (the supervisor's fork server: no socket may be
        inherited by a fork). They are made again on next use."""
        self.clients.close()
        self.scripts.forget()


def merge(total: RequeueResult, result: RequeueResult) -> None:
    total.moved += result.moved
    total.suspects += result.suspects
    total.failed += result.failed
    total.seen += result.seen
    total.unlisted += [q for q in result.unlisted if q not in total.unlisted]
    total.wrong_type += [k for k in result.wrong_type if k not in total.wrong_type]
    total.cancelled += result.cancelled
    total.buried += result.buried
