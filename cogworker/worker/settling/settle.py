"""Settling fetched jobs: acknowledgements (batched into the next fetch) and filings into
retry/dead, with what happens when Redis is failing at that moment.

A filing that fails is kept and retried (pending.py, as is a result whose write failed); at
shutdown it is handed to Redis (cogworker:unsettled) for another process to file (handover.py). If
even that fails, the job is still on this process's in-progress list, so recovery runs it again: a
job is never lost, at worst it runs twice.

A filing whose reply was lost is sent again: settle.lua files it once and says so (filing.py), and
its locks are then released. A job whose list entry a restarted Redis lost is filed all the same.

A filing stopped by a key of the wrong type (settle.lua checks every key before it changes anything)
is kept the same way, and the key guard is asked to move the key aside.

A process silent past COGWORKER_ORPHAN_THRESHOLD_S (a partition) is declared dead and its list
requeued while it still runs those jobs. Back in touch, the reconciler finds the jobs it holds that
are no longer on its list and `disown`s them: their acknowledgements and filings are dropped, since
those jobs now belong to the process running the requeued copy (an ack could take that copy's entry
off the list if this process fetched it again; a filing would put a third run in retry).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter, deque
from typing import Any, Protocol

import redis
import structlog

from cogworker import codec
from cogworker.api import death, sidekiq_payload
from cogworker.api.retry import Filing, encoded, storable
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard, keys, outcomes
from cogworker.store.connection import is_unavailable
from cogworker.store.redis_context import RedisContext

# Filing helpers, in filing.py; file_unsettled and quarantine_head are imported from here too.
from cogworker.worker.fetching.fetch import on_list
from cogworker.worker.settling.filing import (
    death_notice,
    file_unsettled,
    quarantine_head,
    run_filing,
    settle_reply,
)
from cogworker.worker.settling.handover import handover_record
from cogworker.worker.settling.partition_filing import file_in_partition
from cogworker.worker.settling.pending import PendingFiling, PendingResult, PendingSettles
from cogworker.worker.settling.shard_route import ShardRoute

__all__ = [
    "Settler",
    "file_unsettled",
    "handover_record",
    "quarantine_head",
]

log = structlog.get_logger("cogworker.settle")

# A filing stopped by a wrong-type key is retried on every fetch loop: logged (and the guard asked)
# at most this often per key.
WRONG_TYPE_REPORT_S = 10.0


class ListedJobs(Protocol):
    """After a fallback to basic fetch, the jobs still on the in-progress list
    (worker/fetching/fetch_fallback.py)."""

    def take(self, raw: str) -> str: ...

    def peek(self, raw: str) -> str: ...


class Settler(PendingSettles):
    """`route`: in the sharded layout, where each job's settle goes (shard_route.py); None in the
    one-slot layout, whose path is unchanged."""

    def __init__(self, ctx: RedisContext, in_progress_key: str, route: ShardRoute | None = None) -> None:
        self._route = route
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._locks = ctx.locks
        self._in_progress = in_progress_key
        self._acks: deque[tuple[str, str]] = deque()
        self._pending: list[PendingFiling] = []
        self._pending_results: list[PendingResult] = []
        self._lock = threading.Lock()
        self._wrong_type_reported: dict[str, float] = {}
        # Payloads requeued by orphan recovery while this process was silent: settled nowhere.
        self._disowned: Counter[str] = Counter()
        self._members: Any = None  # batch_settle.MemberAcks, made for the first batch member
        self._still_listed: ListedJobs | None = None  # after a fallback (use_basic_fetch)

    @property
    def client(self) -> redis.Redis:
        return self._client

    @property
    def settings(self) -> SettingsFields:
        return self._settings

    @property
    def route(self) -> ShardRoute | None:
        """Where a settle goes in the sharded layout (None in the one-slot layout): the chain step's
        partition ack uses it (worker/settling/chain_sharded.py)."""
        return self._route

    def use_basic_fetch(self, still_listed: ListedJobs | None = None) -> None:
        """The worker fell back to basic fetch (worker/fetching/fetch_fallback.py): jobs from now on are on no
        list, so a filing or a member's ack must not wait for a removal from one (it would never come,
        and the job would end unfiled). A job fetched before is settled on the list it is still on:
        `still_listed` names it (once per copy), or "" for a job on none."""
        self._still_listed = still_listed
        self._in_progress = ""

    def list_for(self, raw: str) -> str:
        """The in-progress list this job is taken off when it is settled ("": none, basic fetch). A
        copy fetched before a fallback is used up by this call: one call per settle."""
        if self._route is not None:
            partition = self._route.placements.take(raw)
            return self._route.list_of(partition) if partition is not None else ""
        if self._in_progress or self._still_listed is None:
            return self._in_progress
        return self._still_listed.take(raw)

    def list_of(self, raw: str) -> str:
        """The in-progress list a running job is on, as `list_for` would name it, using nothing up."""
        if self._route is not None:
            partition = self._route.placements.peek(raw)
            return self._route.list_of(partition) if partition is not None else ""
        if self._in_progress or self._still_listed is None:
            return self._in_progress
        return self._still_listed.peek(raw)

    # Jobs requeued while this process was declared dead -------------------------------------
    def disown(self, raws: Counter[str]) -> None:
        """On the fetcher thread: these held jobs (once per copy) are no longer on our list. Their
        pending acknowledgements and filings are dropped now, the settles of those still running when
        they end."""
        with self._lock:
            self._disowned.update(raws)
            kept_filings = [item for item in self._pending if not self._drop_locked(item.raw)]
            self._pending = kept_filings
        # Acks are appended by job threads, taken only by this (the fetcher) thread.
        self.return_acks([(raw, jid) for raw, jid in self.take_acks() if not self._drop(raw)])

    def prune_disowned(self, held: Counter[str]) -> None:
        """Forget marks for payloads no longer held (their settle came before the mark)."""
        with self._lock:
            self._disowned = Counter(
                {raw: min(n, held[raw]) for raw, n in self._disowned.items() if held[raw]}
            )

    @property
    def disowned(self) -> int:
        with self._lock:
            return sum(self._disowned.values())

    def _drop(self, raw: str) -> bool:
        if not self._disowned:  # almost always: no lock on every job's ack
            return False
        with self._lock:
            return self._drop_locked(raw)

    def _drop_locked(self, raw: str) -> bool:
        """True (and one mark used) when `raw` is disowned: its settle is skipped."""
        if self._disowned[raw] <= 0:
            self._disowned.pop(raw, None)
            return False
        self._disowned[raw] -= 1
        if not self._disowned[raw]:
            del self._disowned[raw]
        if self._route is not None:
            self._route.placements.take(raw)  # settled nowhere: off the books
        job = codec.loads_dict(raw) or {}
        log.info("settle_skipped_requeued_job", jid=job.get("jid"), note="another process runs its copy")
        return True

    # Acknowledgements: taken by the fetcher on its next round trip.
    def ack(self, raw: str, jid: str) -> None:
        if self._drop(raw):
            return
        self._acks.append((raw, jid))

    def ack_member(self, raw: str, job: dict[str, Any], outcome: str = "ok") -> None:
        """A batch member's (or callback's) ack, with its count in its batch: one script, sent now."""
        if self._drop(raw):
            return
        if self._members is None and self._route is not None:
            from cogworker.worker.settling.batch_shard_acks import ShardedMemberAcks  # batches used

            self._members = ShardedMemberAcks(self._route, self._settings, self._outages)
        elif self._members is None:
            from cogworker.worker.settling.batch_settle import MemberAcks  # only where batches are used

            self._members = MemberAcks(self._client, self._settings, self._outages)
        self._members.ack(raw, job, outcome, self.list_for(raw))

    def end_unrun(self, raw: str, job: dict[str, Any], outcome: str) -> None:
        """A job that ended without running (expired, cancelled): counted in Redis, its locks (a
        unique claim) released, then acknowledged like a finished one. The count and the release are
        best-effort (logged, deferred); the acknowledgement is as reliable as any."""
        if self._drop(raw):
            return
        jid = str(job.get("jid") or "")
        if self._route is None:
            outcomes.record(self._client, outcome, jid)
        else:  # counted in the job's partition, as its ack is
            partition = self._route.partition_of(self.list_of(raw), raw)
            outcomes.record(self._route.client(partition), outcome, jid, partition)
        self._locks.release_terminal(job)
        if sidekiq_payload.batch_member(job):
            self.ack_member(raw, job, outcome)
        else:
            self.ack(raw, jid)

    def take_acks(self) -> list[tuple[str, str]]:
        taken: list[tuple[str, str]] = []
        while self._acks:
            taken.append(self._acks.popleft())
        return taken

    def return_acks(self, acks: list[tuple[str, str]]) -> None:
        """A fetch that failed hands its acknowledgements back, to go with the next one."""
        self._acks.extendleft(reversed(acks))

    @property
    def pending_acks(self) -> int:
        return len(self._acks)

    # Filings into retry/dead.
    def file(self, raw: str, filing: Filing, run_id: str = "") -> bool:
        """File now; on a Redis failure keep it for later. True when it was filed now. The payload is
        encoded first (retry.storable): a payload JSON can't hold is filed sanitised, never kept
        and retried as if Redis had failed. `run_id`: the Redis the job was fetched from (Work)."""
        if self._drop(raw):
            return True
        if keys.SIDEKIQ:  # no `at`, no empty `kwargs` in a set Sidekiq reads too
            filing = sidekiq_payload.for_set(filing)
        filing = storable(filing, raw)
        listed = self.list_for(raw)
        if self._route is not None and self._route.health.is_down(self._route.partition_of(listed, raw)):
            # Its partition's master is known away: kept at once, not a client timeout on this thread.
            with self._lock:
                self._pending.append(PendingFiling(raw, filing, listed, run_id))
            return False
        try:
            filed = self._file_now(raw, filing, listed, run_id)
        except Exception as exc:
            self._report(exc)
            if self._route is not None and is_unavailable(exc):
                # Its partition's master is away: kept filings wait for it to answer a probe.
                self._route.health.failed(self._route.partition_of(listed, raw), exc)
            with self._lock:
                self._pending.append(PendingFiling(raw, filing, listed, run_id))
            return False
        self._outages.recovered("Settle")
        if filed and filing.dead:
            self._locks.release_terminal(filing.payload)
        return True

    def _file_now(self, raw: str, filing: Filing, in_progress: str, run_id: str) -> bool:
        """True when the job is filed: by this call, or by an earlier one whose reply was lost."""
        if self._route is not None:
            return file_in_partition(
                (self._scripts, self._settings, self._route), raw, filing, in_progress, run_id
            )
        filing, text = encoded(filing, raw)
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        dead = filing.dead
        jid = str(filing.payload.get("jid") or "")
        # A job filed in dead gets its death notice (api/death.py) in the same script.
        notice_keys, notice_args = death_notice(self._settings, death.cause_of(filing.payload), text, dead)
        # A filing in the schedule set is a job a rate limiter put back (api/limit_jobs.py): counted
        # as limited, not failed, by the same script.
        limited = filing.set_key == keys.SCHEDULE
        listed, payload = on_list(in_progress, raw, filing.set_key)
        reply = run_filing(
            (self._client, self._scripts, self._settings),
            "settle",
            [
                listed,
                filing.set_key,
                keys.stat(keys.LIMITED) if limited else keys.STAT_FAILED,
                keys.stat_day(keys.LIMITED, day) if limited else keys.stat_failed_day(day),
                keys.orphanings(jid),
                *notice_keys,
            ],
            [
                payload,
                filing.score,
                text,
                "1",
                *_cap(self._settings, filing),
                run_id,
                *notice_args,
            ],
            filing.payload if dead else {},
        )
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            raise key_guard.WrongTypeKey(wrong, None)
        return settle_reply(reply, jid, filing.set_key)

    def _report(self, exc: Exception) -> None:
        if not isinstance(exc, key_guard.WrongTypeKey):
            self._outages.report("Settle", exc)
            return
        now = time.monotonic()
        if self._wrong_type_reported.get(exc.key, -WRONG_TYPE_REPORT_S) > now - WRONG_TYPE_REPORT_S:
            return
        self._wrong_type_reported[exc.key] = now
        log.error(
            "filing_stopped_by_wrong_type_key",
            key=exc.key,
            note="the job stays in progress and is filed once the key guard has moved the key aside",
        )
        key_guard.request(self._client, exc.key)

    def holding(self) -> list[str]:
        """Payloads still to settle here (acknowledgements not yet sent, filings not yet made): their
        jobs stay on the in-progress list until then, and a reconcile
        (worker/recovering/reconcile.py) keeps them."""
        with self._lock:
            pending = [item.raw for item in self._pending] + [item.raw for item in self._pending_results]
        if self._members is not None:
            pending += self._members.holding()
        # list() copies the deque in one step under the GIL, safe against a job thread's append.
        return [raw for raw, _jid in list(self._acks)] + pending


def _cap(settings: SettingsFields, filing: Filing) -> tuple[int, float]:
    """settle.lua's trim of the set filed in: the dead set's cap, the discarded set's (the Sidekiq
    mode), or none."""
    if filing.discarded:
        return sidekiq_payload.DISCARD_KEEP, time.time() - sidekiq_payload.DISCARD_KEEP_S
    if filing.dead:
        return settings.dead_max_jobs, time.time() - settings.dead_timeout_s
    return 0, time.time() - settings.dead_timeout_s
