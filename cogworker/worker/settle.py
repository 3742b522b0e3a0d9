"""Settling fetched jobs: acknowledgements (batched into the next fetch) and filings into
retry/dead, with what happens when Redis is failing at that moment.

A filing that fails is kept and retried; at shutdown it is handed to Redis (cogworker:unsettled)
for another process to file. If even that fails, the job is still on this process's in-progress
list, so recovery runs it again: a job is never lost, at worst it runs twice. A filing stopped by a
key of the wrong type (settle.lua checks every key before it changes anything) is kept the same way,
and the key guard is asked to move the key aside.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import death, results
from cogworker.api.retry import Filing, encoded, storable
from cogworker.settings import Settings
from cogworker.store import key_guard, keys, outcomes
from cogworker.store.connection import is_unavailable
from cogworker.store.locks import Locks
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts

log = structlog.get_logger("cogworker.settle")

# A filing stopped by a wrong-type key is retried on every fetch loop: logged (and the guard asked)
# at most this often per key.
WRONG_TYPE_REPORT_S = 10.0


@dataclass(slots=True)
class PendingFiling:
    raw: str
    filing: Filing


@dataclass(slots=True)
class PendingResult:
    """A job's result still to write (api/results.py); `then` (its ack, or its dead filing) waits."""

    raw: str
    jid: str
    record: str
    ttl: float
    then: Callable[[], object]


class Settler:
    def __init__(self, ctx: RedisContext, in_progress_key: str) -> None:
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

    @property
    def client(self) -> redis.Redis:
        return self._client

    @property
    def in_progress_key(self) -> str:
        return self._in_progress

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
        job = codec.loads_dict(raw) or {}
        log.info("settle_skipped_requeued_job", jid=job.get("jid"), note="another process runs its copy")
        return True

    # Acknowledgements: taken by the fetcher on its next round trip.
    def ack(self, raw: str, jid: str) -> None:
        if self._drop(raw):
            return
        self._acks.append((raw, jid))

    def end_unrun(self, raw: str, job: dict[str, Any], outcome: str) -> None:
        """A job that ended without running (expired, cancelled): counted in Redis, its locks (a
        unique claim) released, then acknowledged like a finished one. The count and the release are
        best-effort (logged, deferred); the acknowledgement is as reliable as any."""
        if self._drop(raw):
            return
        jid = str(job.get("jid") or "")
        outcomes.record(self._client, outcome, jid)
        self._locks.release_terminal(job)
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

    # Results (api/results.py): written before the job's ack or dead filing, so a job whose result
    # is lost in a crash runs again and writes it. A write that fails is kept, with what follows it,
    # and retried like a filing; at shutdown the job stays in progress and runs again.
    def after_result(self, raw: str, jid: str, record: str, ttl: float, then: Callable[[], object]) -> None:
        try:
            results.store(self._client, jid, record, ttl)
        except Exception as exc:
            self._report(exc)
            with self._lock:
                self._pending_results.append(PendingResult(raw, jid, record, ttl, then))
            return
        then()

    def _retry_results(self) -> bool:
        """Write the kept results, each then acked or filed. False when Redis still fails."""
        with self._lock:
            pending, self._pending_results = self._pending_results, []
        for index, item in enumerate(pending):
            try:
                results.store(self._client, item.jid, item.record, item.ttl)
            except Exception as exc:
                self._report(exc)
                with self._lock:
                    self._pending_results[:0] = pending[index:]
                return False
            item.then()
        return True

    # Filings into retry/dead.
    def file(self, raw: str, filing: Filing) -> bool:
        """File now; on a Redis failure keep it for later. True when it was filed now. The payload is
        encoded first (retry.storable): a payload JSON can't hold is filed sanitised, never kept
        and retried as if Redis had failed."""
        if self._drop(raw):
            return True
        filing = storable(filing, raw)
        try:
            filed = self._file_now(raw, filing)
        except Exception as exc:
            self._report(exc)
            with self._lock:
                self._pending.append(PendingFiling(raw, filing))
            return False
        self._outages.recovered("Settle")
        if filed and filing.dead:
            self._locks.release_terminal(filing.payload)
        return True

    def _file_now(self, raw: str, filing: Filing) -> bool:
        filing, text = encoded(filing, raw)
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        dead = filing.dead
        jid = str(filing.payload.get("jid") or "")
        # A job filed in dead gets its death notice (api/death.py) in the same script.
        notice_keys, notice_args = death_notice(self._settings, death.cause_of(filing.payload), text, dead)
        reply = self._scripts.run(
            "settle",
            [
                self._in_progress,
                filing.set_key,
                keys.STAT_FAILED,
                keys.stat_failed_day(day),
                keys.orphanings(jid),
                *notice_keys,
            ],
            [
                raw,
                filing.score,
                text,
                "1",
                self._settings.dead_max_jobs if dead else 0,
                time.time() - self._settings.dead_timeout_s,
                *notice_args,
            ],
            client=self._client,
        )
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            raise key_guard.WrongTypeKey(wrong, None)
        return bool(reply)

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

    def retry_pending(self) -> None:
        if self._pending_results and not self._retry_results():
            return
        with self._lock:
            pending, self._pending = self._pending, []
        for index, item in enumerate(pending):
            try:
                filed = self._file_now(item.raw, item.filing)
            except Exception as exc:
                self._report(exc)
                with self._lock:
                    self._pending[:0] = pending[index:]
                return
            if filed and item.filing.dead:
                self._locks.release_terminal(item.filing.payload)
        if pending:
            self._outages.recovered("Settle")

    @property
    def pending_filings(self) -> int:
        """Filings, and results (which an ack or filing waits for), still to write."""
        with self._lock:
            return len(self._pending) + len(self._pending_results)

    def holding(self) -> list[str]:
        """Payloads still to settle here (acknowledgements not yet sent, filings not yet made): their
        jobs stay on the in-progress list until then, and a reconcile (reconcile.py) keeps them."""
        with self._lock:
            pending = [item.raw for item in self._pending] + [item.raw for item in self._pending_results]
        # list() copies the deque in one step under the GIL, safe against a job thread's append.
        return [raw for raw, _jid in list(self._acks)] + pending

    def hand_over(self) -> int:
        """At shutdown: give unfiled filings to Redis for another process. Returns how many remain.
        A job whose result is still unwritten stays in progress: requeued, it runs again."""
        with self._lock:
            pending, self._pending = self._pending, []
            unwritten, self._pending_results = len(self._pending_results), []
        if unwritten:
            log.error(
                "results_unwritten_jobs_left_in_progress",
                count=unwritten,
                note="Redis is unreachable: their results were not written, so they will run again",
            )
        left: list[PendingFiling] = []
        for item in pending:
            record = handover_record(*encoded(item.filing, item.raw))
            try:
                reply = self._scripts.run(
                    "handover", [keys.UNSETTLED, self._in_progress], [record, item.raw], client=self._client
                )
                wrong = key_guard.script_wrong_type(reply)
                if wrong is not None:
                    raise key_guard.wrong_type_error(self._client, wrong)
                if not reply:
                    # Off our list: requeued while we were silent (handover.lua), run elsewhere.
                    log.info("handover_skipped_requeued_job", jid=item.filing.payload.get("jid"))
            except Exception as exc:
                if not is_unavailable(exc):
                    log.error("handover_failed", error=f"{type(exc).__name__}: {exc}")
                left.append(item)
        if left:
            log.error(
                "unsettled_jobs_left_in_progress",
                count=len(left),
                note="Redis is unreachable: they stay on the in-progress list and will run again",
            )
        return len(left) + unwritten


def handover_record(filing: Filing, text: str) -> str:
    """The JSON of {set, score, payload}, around the payload's text as already encoded (encoding it
    again could only fail, where the filing's own encoding was made safe)."""
    return f'{{"set":{codec.dumps(filing.set_key)},"score":{codec.dumps(filing.score)},"payload":{text}}}'


def file_unsettled(client: redis.Redis, scripts: Scripts, settings: Settings, locks: Locks) -> int:
    """File the records stopping processes handed over. A record that can't be filed (not JSON, or
    naming a set that isn't one of ours) is quarantined for a human with a TTL, so it neither blocks
    the records behind it nor is silently deleted."""
    filed = 0
    for record in client.lrange(keys.UNSETTLED, 0, 99):
        entry = codec.loads_dict(record)
        valid = (
            entry is not None
            and entry.get("set") in (keys.RETRY, keys.DEAD, keys.SCHEDULE)
            and isinstance(entry.get("score"), int | float)
            and isinstance(entry.get("payload"), dict)
        )
        if not valid or entry is None:
            quarantine_head(client, settings, keys.UNSETTLED, str(record), "unsettled")
            continue
        payload: dict[str, Any] = entry["payload"]
        try:
            text = codec.dumps(payload)
        except codec.EncodeError:
            # Not one we handed over (those are encoded safely): set aside like any unusable record.
            quarantine_head(client, settings, keys.UNSETTLED, str(record), "unsettled")
            continue
        notice_keys, notice_args = death_notice(
            settings, death.cause_of(payload), text, entry["set"] == keys.DEAD
        )
        done = scripts.run(
            "file_unsettled",
            [keys.UNSETTLED, entry["set"], keys.orphanings(str(payload.get("jid") or "")), *notice_keys],
            [record, entry["score"], text, *notice_args],
            client=client,
        )
        wrong = key_guard.script_wrong_type(done)
        if wrong is not None:
            # The head stays where it is (the records behind it wait their turn) until the guard
            # has moved the key aside.
            log.error("unsettled_filing_stopped_by_wrong_type_key", key=wrong)
            key_guard.request(client, wrong)
            break
        if done:
            filed += 1
            if entry["set"] == keys.DEAD:
                locks.release_terminal(payload)
    return filed


def death_notice(settings: Settings, cause: str, text: str, dead: bool) -> tuple[list[str], list[Any]]:
    """The extra keys and arguments a filing script takes to push a death notice: none unless the
    filing is in dead."""
    if not dead:
        return [], []
    return [keys.DEATHS], [death.notice(cause, text), settings.death_notices_max]


def quarantine_head(client: redis.Redis, settings: Settings, list_key: str, record: str, what: str) -> None:
    """Move one unusable record aside (its own key, with a TTL) and log it for a human. Written aside
    before it is taken off the list: MULTI keeps the commands before a failing one, so a removal
    first would lose the record if the write failed."""
    target = keys.quarantine(f"{what}:{time.time():.6f}")
    pipe = client.pipeline(transaction=True)
    pipe.set(target, record, ex=int(settings.quarantine_ttl_s))
    pipe.lrem(list_key, 1, record)
    pipe.execute()
    log.error("record_quarantined", source=list_key, key=target, record=codec.escape(record[:200]))
