"""Orphan recovery: jobs left on a dead process's in-progress list go back to their queues.

Every live process does this every `orphan_check_interval_s` (and once at boot, with a keyspace SCAN
for lists no registry names); the supervisor does it at once for a child it saw die. The death check
runs inside the requeue script, atomically with the requeue (requeue.lua says why). A job orphaned
more than `max_orphanings` times is a poison pill: it goes to dead with a ProcessDied error (and, if
its status is tracked, its status becomes "failed"). A job `cogworker.cancel` was asked for is not
requeued at all: it is counted cancelled (requeue.lua reads the cancel record).

A death convicts only the job that was alone on its process's list. Every death is counted, but a job
that shared one may be an innocent beside a poison pill, so a shared death buries nobody. A job
orphaned `suspect_at` times instead goes to its queue's suspects list (`keys.suspects`), and a process
runs a suspect alone (fetch.lua): its next death is its own, and convicts it past the limit. One
death is an accident (the OOM killer, a lost host) and costs nothing new; the second, a pattern.

In the sharded layout (store/shards.py) a process has one list per queue partition, each in its
partition's slot: worker/recovering/sharded_recovery.py runs the same script once per partition, with
that partition's keys (`ListKeys`), and a job goes back to the partition it was taken from.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import redis
import structlog

from cogworker import codec
from cogworker.store import job_keys, key_guard, keys, outcomes, shards, sidekiq_keys
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.loops import sidekiq_presence
from cogworker.worker.recovering.burials import Burials
from cogworker.worker.recovering.requeue_result import ListKeys, PartitionsUnreachable, RequeueResult

if TYPE_CHECKING:
    from cogworker.worker.recovering.sharded_recovery import ShardedRecovery

log = structlog.get_logger("cogworker.recovery")

ORPHANINGS_TTL_S = 7 * 24 * 3600
PERIODIC_RUNNING_TTL_S = 24 * 3600
# The orphaning that makes a job a suspect, when the limit allows it (suspect_at).
SUSPECT_AT = 2


def suspect_at(max_orphanings: int) -> int:
    """How many orphanings make a job a suspect: the second, or the first when the limit is lower
    (with COGWORKER_MAX_ORPHANINGS=1 a pill must run alone by its second death to be convicted at
    it)."""
    return max(1, min(SUSPECT_AT, max_orphanings))


class Recovery:
    def __init__(
        self, ctx: RedisContext, identity: str = "", shard_clients: ShardClients | None = None
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._locks = ctx.locks
        self._identity = identity
        self.sharded: ShardedRecovery | None = None
        if shards.is_sharded():
            from cogworker.worker.recovering.sharded_recovery import ShardedRecovery

            self.sharded = ShardedRecovery(self, ctx, shard_clients)
        self.burials = Burials(ctx, self.sharded.scripts.of if self.sharded is not None else None)

    def one_slot_list(self, identity: str) -> ListKeys:
        return ListKeys(
            self._client,
            self._scripts,
            keys.in_progress(identity),
            keys.process(identity),
            keys.LAST_BEAT,
            keys.DEAD,
            keys.QUEUES,
            keys.LIVE_QUEUES,
            keys.CANCELS,
        )

    def requeue(self, identity: str, *, if_dead_for: float | None, count_orphans: bool) -> RequeueResult:
        """Requeue `identity`'s in-progress list (in the sharded layout, every partition's).
        `if_dead_for=None` skips the death check (the caller knows the owner is dead, or is the owner
        shutting down)."""
        if self.sharded is not None:
            return self.sharded.requeue(identity, if_dead_for=if_dead_for, count_orphans=count_orphans)
        return self.requeue_list(self.one_slot_list(identity), identity, if_dead_for, count_orphans)

    def requeue_list(
        self,
        where: ListKeys,
        identity: str,
        if_dead_for: float | None,
        count_orphans: bool,
        *,
        shared: bool = False,
    ) -> RequeueResult:
        """Requeue one list. The list is read first, to declare the keys its jobs need
        (store/job_keys.py); a job the script had no keys for (it came after the read) stays on the
        list, and one more pass declares what the script named. `shared`: the owner died holding more
        than one job (counted over every list it had), so the death convicts nobody."""
        declared = job_keys.Declared()
        total = RequeueResult()
        for _ in range(job_keys.MAX_PASSES):
            raws = [str(raw) for raw in where.client.lrange(where.in_progress, 0, -1)]
            if not raws and where.partition is not None:
                # Sharded: most partitions' lists are empty; the script would find nothing to move.
                return total
            declared.add_jobs(raws, where.default_queue)
            result, left, needs = self._requeue_pass(
                where, identity, declared, if_dead_for, count_orphans, shared
            )
            if result.alive:
                # Nothing touched in this pass; what an earlier one moved (the owner beat since) stands.
                total.alive = True
                return total
            # A job left for a later pass shared the death with those this one took: it is not alone.
            shared = shared or result.seen > 1
            total.moved += result.moved
            total.suspects += result.suspects
            total.failed = result.failed  # a job kept by a wrong-type key is counted again each pass
            total.unlisted += [q for q in result.unlisted if q not in total.unlisted]
            total.wrong_type += [k for k in result.wrong_type if k not in total.wrong_type]
            total.cancelled += result.cancelled
            total.buried += result.buried
            if not left:
                return total
            declared.add_needs(needs)
        log.warning("requeue_left_jobs_for_next_pass", owner=identity, note="the list kept changing")
        return total

    def _requeue_pass(
        self,
        where: ListKeys,
        identity: str,
        declared: job_keys.Declared,
        if_dead_for: float | None,
        count_orphans: bool,
        shared: bool,
    ) -> tuple[RequeueResult, int, list[Any]]:
        """One run of requeue.lua: its result, how many jobs it left for want of keys, and the
        (kind, name) pairs it named for them."""
        s = self._settings
        job_key_list, job_key_args = declared.keys_and_args(where.partition)
        batch_key_list, batch_key_args = declared.batch_keys_and_args(where.partition)
        member_key_list, member_key_args = declared.member_keys_and_args(where.partition, s.batch_ttl_s)
        reply: list[Any] = where.scripts.run(
            "requeue",
            [
                where.in_progress,
                where.presence,
                where.last_beat,
                where.dead,
                where.registry,
                where.live_queues,
                where.cancels,
                *job_key_list,
                *batch_key_list,
                *member_key_list,
            ],
            [
                where.default_queue,
                identity,
                "" if if_dead_for is None else if_dead_for,
                "1" if count_orphans else "",
                ORPHANINGS_TTL_S,
                s.max_orphanings,
                2 * s.presence_ttl_s,
                PERIODIC_RUNNING_TTL_S,
                int(time.time()),
                suspect_at(s.max_orphanings),
                "1" if shared else "",
                *job_key_args,
                *batch_key_args,
                *member_key_args,
            ],
            client=where.client,
        )
        moved, failed, n_unlisted, n_wrong, n_cancelled, left, n_needs, n_suspects = (
            int(n) for n in reply[:8]
        )
        if moved < 0:
            return RequeueResult(alive=True), 0, []
        at = 8 + n_unlisted + n_wrong
        needs_at = at + n_cancelled
        result = RequeueResult(
            moved=moved,
            failed=failed,
            unlisted=[str(q) for q in reply[8 : 8 + n_unlisted]],
            wrong_type=[str(k) for k in reply[8 + n_unlisted : at]],
            cancelled=[str(r) for r in reply[at:needs_at]],
            buried=[str(r) for r in reply[needs_at + 2 * n_needs :]],
            suspects=n_suspects,
        )
        result.seen = moved + failed + left + n_cancelled + len(result.buried)
        self._end_cancelled(identity, result.cancelled)
        if where.partition is not None and self.sharded is not None:
            self.sharded.move_holds(where.partition, declared.hold_ids())
        if where.partition is not None:
            # The script's registry and live-queue reads were the partition's stand-ins: whether a
            # live process reads the queue is asked of the home slot (sharded_recovery.py).
            result.unlisted = []
        if result.unlisted:
            log.warning(
                "requeued_onto_unread_queues",
                owner=identity,
                queues=sorted(result.unlisted),
                note="no live process has read these queues lately: make sure some worker reads them",
            )
        if failed:
            log.error(
                "requeue_failed_for_some_jobs",
                owner=identity,
                count=failed,
                wrong_type_keys=sorted(result.wrong_type),
                note="kept on the in-progress list; retried next pass, once the key guard has moved "
                "these keys aside",
            )
        if result.wrong_type:
            key_guard.request(self._client, *result.wrong_type)
        self.complete_burials(result.buried, where.partition)
        return result, left, reply[needs_at : needs_at + 2 * n_needs]

    def _end_cancelled(self, identity: str, raws: list[str]) -> None:
        """Jobs cancelled while their process was dying, taken off its list instead of requeued:
        counted, their locks released (ops/cancel.py, worker/running/cancelled.py)."""
        for raw in raws:
            job = codec.loads_dict(raw) or {}
            jid = str(job.get("jid") or "")
            outcomes.record(self._client, "cancelled", jid)
            self._locks.release_terminal(job)
            log.warning("cancelled_job_not_requeued", owner=identity, jid=jid, job=job.get("class"))

    def requeue_dead(self, identity: str) -> RequeueResult:
        """For the supervisor: a child it reaped is known dead; requeue now, counting orphanings."""
        result = self.requeue(identity, if_dead_for=None, count_orphans=True)
        if result.moved or result.buried:
            log.warning(
                "requeued_jobs_of_dead_process",
                owner=identity,
                moved=result.moved,
                suspects=result.suspects,
                dead=len(result.buried),
            )
        self.forget_if_empty(identity)
        return result

    def recover_orphans(self, *, scan: bool = False) -> int:
        """Requeue the lists of every process that has been silent past the orphan threshold."""
        moved = 0
        for identity in self.candidates(scan=scan):
            if identity == self._identity:
                continue
            try:
                result = self.requeue(
                    identity, if_dead_for=self._settings.orphan_threshold_s, count_orphans=True
                )
            except PartitionsUnreachable as exc:
                # Sharded: the partitions that answered were requeued; the rest wait for the next
                # check, and the other owners' jobs don't wait for them.
                self._outages.report("Orphan recovery", exc)
                moved += exc.result.moved
                continue
            except redis.ResponseError as exc:
                if not key_guard.is_wrong_type(exc):
                    raise
                # Its list (or the beat registry) has the wrong type: the other owners' jobs must
                # not wait for the guard, which is asked to move the keys aside now.
                log.error("orphan_check_stopped_by_wrong_type_key", owner=identity, error=str(exc))
                key_guard.request(self._client, keys.in_progress(identity), keys.LAST_BEAT)
                continue
            if result.alive:
                continue
            self.forget_if_empty(identity)
            if result.moved or result.buried:
                log.warning(
                    "requeued_orphans",
                    owner=identity,
                    moved=result.moved,
                    suspects=result.suspects,
                    dead=len(result.buried),
                )
            moved += result.moved
        self.retry_burials()
        return moved

    def candidates(self, *, scan: bool) -> set[str]:
        found = {str(m) for m in self._client.smembers(keys.IN_PROGRESS_IDENTITIES)}
        if scan and self.sharded is not None:
            found |= self.sharded.scan()
        elif scan:
            for key in self._client.scan_iter(match=keys.IN_PROGRESS_PREFIX + "*", count=500):
                found.add(str(key).removeprefix(keys.IN_PROGRESS_PREFIX))
        return found

    def forget_if_empty(self, identity: str) -> None:
        """Forget a dead identity once its list is empty (sharded: every partition's list, read after
        the requeue; one that doesn't answer keeps it registered for the next check)."""
        empty = (
            self.sharded.all_empty(identity)
            if self.sharded is not None
            else self._client.llen(keys.in_progress(identity)) == 0
        )
        if empty:
            pipe = self._client.pipeline(transaction=False)
            pipe.srem(keys.IN_PROGRESS_IDENTITIES, identity)
            pipe.hdel(keys.LAST_BEAT, identity)
            if self._prunable(identity):
                pipe.srem(keys.PROCESSES, identity)
            pipe.delete(keys.work(identity))
            pipe.execute()

    def _prunable(self, identity: str) -> bool:
        """Whether `identity` may leave the `processes` set. In the Sidekiq mode the set is Sidekiq's
        too, and a member with a Sidekiq presence cogworker didn't write is a live Ruby process: only
        Sidekiq prunes it. One of ours leaves it, and its Sidekiq presence with it."""
        if not sidekiq_keys.enabled():
            return True
        info = self._client.hget(sidekiq_keys.presence(identity), "info")
        if info is not None and not sidekiq_presence.written_by_cogworker(str(info)):
            return False
        self._client.delete(sidekiq_keys.presence(identity), sidekiq_keys.busy_jobs(identity))
        return True

    # Poison pills: requeue.lua files them raw in dead; burials.py gives them a proper dead entry.
    def complete_burials(self, raws: list[str], partition: shards.Partition | None = None) -> None:
        """`partition`: the sharded layout's partition whose dead set holds them (None: keys.DEAD)."""
        self.burials.complete(raws, partition)

    def retry_burials(self) -> None:
        self.burials.retry()

    @property
    def pending_burials(self) -> int:
        return self.burials.pending

    def reset(self) -> None:
        self.burials.reset()
