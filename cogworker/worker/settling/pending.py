"""The Settler's kept work: filings and results that Redis failed to take, retried on the fetcher's
every loop and, at shutdown, handed over to Redis for another process to file (handover.py).

A job's result is written before its acknowledgement or dead filing (api/results.py), so a job whose
result is lost in a crash runs again and writes it. A write that fails is kept with what follows it
(`then`) and retried like a filing. At shutdown a job whose result is still unwritten stays in
progress: requeued, it runs again.

A filing is kept with the in-progress list its job was taken from then, and the Redis run it was
fetched from, so a retry files it exactly as the first try would have.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker.api import results
from cogworker.api.retry import Filing
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts
from cogworker.worker.settling.handover import hand_over
from cogworker.worker.settling.shard_route import ShardRoute

log = structlog.get_logger("cogworker.settle")


@dataclass(slots=True)
class PendingFiling:
    raw: str
    filing: Filing
    listed: str  # the in-progress list the job is on ("": basic fetch popped it)
    run_id: str = ""  # of the Redis the job was fetched from (fetch.Work)


@dataclass(slots=True)
class PendingResult:
    """A job's result still to write (api/results.py); `then` (its ack, or its dead filing) waits."""

    raw: str
    jid: str
    record: str
    ttl: float
    then: Callable[[], object]


class PendingSettles(abc.ABC):
    """The kept half of the Settler: its state lives on the Settler, under `_lock`, and the two
    Settler methods it calls are declared abstract below."""

    _client: redis.Redis
    _scripts: Scripts
    _locks: Locks
    _outages: Outages
    _lock: threading.Lock
    _pending: list[PendingFiling]
    _pending_results: list[PendingResult]
    _members: Any  # batch_settle.MemberAcks, made for the first batch member
    _route: ShardRoute | None  # the sharded layout's (shard_route.py)

    @abc.abstractmethod
    def _file_now(self, raw: str, filing: Filing, in_progress: str, run_id: str) -> bool: ...

    @abc.abstractmethod
    def _report(self, exc: Exception) -> None: ...

    # Results, each written before its job's ack or dead filing.
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

    # Kept filings and results, and batch members' acks (batch_settle.py), sent again.
    def retry_pending(self) -> None:
        if self._pending_results and not self._retry_results():
            return
        if self._members is not None and not self._members.retry():
            return
        with self._lock:
            pending, self._pending = self._pending, []
        waiting: list[PendingFiling] = []  # sharded: their partition's master is down (not tried now)
        for index, item in enumerate(pending):
            if self._route is not None and self._route.health.is_down(
                self._route.partition_of(item.listed, item.raw)
            ):
                # Tried on the fetcher thread: a stopped master would cost every loop a timeout.
                waiting.append(item)
                continue
            try:
                filed = self._file_now(item.raw, item.filing, item.listed, item.run_id)
            except Exception as exc:
                self._report(exc)
                with self._lock:
                    self._pending[:0] = waiting + pending[index:]
                return
            if filed and item.filing.dead:
                self._locks.release_terminal(item.filing.payload)
        if waiting:
            with self._lock:
                self._pending[:0] = waiting
        if len(pending) > len(waiting):
            self._outages.recovered("Settle")

    @property
    def pending_filings(self) -> int:
        """Filings, results (which an ack or filing waits for) and batch members' acks still to write."""
        with self._lock:
            count = len(self._pending) + len(self._pending_results)
        return count + (self._members.pending if self._members is not None else 0)

    def run_id_of(self, raw: str) -> str:
        """The run_id a kept filing's job was fetched from ("" when none is kept or it is unknown)."""
        with self._lock:
            return next((item.run_id for item in self._pending if item.raw == raw), "")

    def hand_over(self, deadline: float = 0.0) -> int:
        """At shutdown: give unfiled filings to Redis for another process (handover.py), each tried
        until `deadline` (monotonic; by default one try). Returns how many are not known to be handed
        over. A job whose result is still unwritten stays in progress: requeued, it runs again."""
        with self._lock:
            pending, self._pending = self._pending, []
            unwritten, self._pending_results = len(self._pending_results), []
        if unwritten:
            log.error(
                "results_unwritten_jobs_left_in_progress",
                count=unwritten,
                note="Redis is unreachable: their results were not written, so they will run again",
            )
        items = [(item.raw, item.filing, item.listed) for item in pending]
        left = hand_over((self._client, self._scripts, self._locks), items, deadline, self._route)
        return left + unwritten
