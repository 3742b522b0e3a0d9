"""Falling back to basic fetch at run time, when Redis refuses a command reliable fetch needs (LMOVE
or BLMOVE renamed away, denied to the ACL user, refused by a proxy), and what a fetch does with a
queue key of the wrong type: the manager's half of both (worker/manager.py), and the fetcher it uses
after the fallback.

A refusal is not a wrong type: nothing is asked of the key guard, and the fallback comes whatever the
number of queues (the fetch script's refusal, or the one-queue BLMOVE's). Jobs fetched onto the
in-progress list before the fallback may still be running, or finished with their acknowledgement not
yet sent. They are settled there, as a reliable fetch would have (`StillListed` knows which payloads
they are): otherwise they would stay on the list, and a SIGKILL's recovery, or a later worker's boot
scan after a clean stop, would run them again. Unstarted ones go back to their queue from the list.
The launcher's stop requeues the list as before, since it stays registered for recovery.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import structlog

from cogworker.worker.fetching.fetch import Fetcher, FetchResult, Reconciled, UnsupportedError, Waited, Work
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.manager")

WRONG_TYPE_LOG_EVERY_S = 60.0


class StillListed:
    """After a fallback: the payloads (once per copy) of the jobs still on the in-progress list
    `key`. Each settle of one of them takes a copy (`take`); a payload basic fetch popped is on no list."""

    def __init__(self, key: str, raws: Iterable[str]) -> None:
        self.key = key
        self._left: Counter[str] = Counter(raws)
        self._lock = threading.Lock()

    def take(self, raw: str) -> str:
        """The list this job is settled on: `key` (a copy used up), or "" (on none)."""
        with self._lock:
            left = self._left.get(raw, 0)
            if left <= 0:
                return ""
            if left == 1:
                del self._left[raw]
            else:
                self._left[raw] = left - 1
            return self.key

    def peek(self, raw: str) -> str:
        """`take`'s answer, with no copy used up (a running job's list, for its batch hold)."""
        with self._lock:
            return self.key if self._left.get(raw, 0) > 0 else ""

    def put_back(self, raws: Iterable[str]) -> None:
        """Copies taken for a settle that failed: it is sent again, and taken again."""
        with self._lock:
            self._left.update(raws)


class FallbackFetch:
    """Basic fetch (BRPOP), with the jobs fetched before the fallback settled on their list: their
    acknowledgements go through the fetch script's acknowledging half (which moves nothing, so needs no
    LMOVE), their give-backs through give_back.lua."""

    keeps_in_progress = False
    in_progress_key = ""

    def __init__(self, basic: Fetcher, listed: Fetcher, still: StillListed) -> None:
        self._basic = basic
        self._listed = listed
        self._still = still

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        on_list = [(raw, jid) for raw, jid in acks if self._still.take(raw)]
        if not on_list:
            return self._basic.fetch(limit, acks)
        taken = Counter(raw for raw, _jid in on_list)
        others = [(raw, jid) for raw, jid in acks if not _use(taken, raw)]
        try:
            listed = self._listed.fetch(0, on_list)
            result = self._basic.fetch(limit, others)
        except Exception:
            # The caller sends every ack again: these go to the list again, where an entry already
            # taken off is not taken (nor counted) twice.
            self._still.put_back(raw for raw, _jid in on_list)
            raise
        result.acked += listed.acked
        return result

    def give_back(self, work: Work) -> bool:
        if self._still.take(work.raw):
            return self._listed.give_back(work)
        return self._basic.give_back(work)

    @property
    def can_block(self) -> bool:
        return self._basic.can_block

    @property
    def run_id(self) -> str:
        return self._basic.run_id

    @property
    def wait_returns_job(self) -> bool:
        return self._basic.wait_returns_job

    def wait(self, timeout_s: float) -> Waited:
        return self._basic.wait(timeout_s)

    def wait_for_wake(self, timeout_s: float) -> None:
        self._basic.wait_for_wake(timeout_s)

    def discard_backlog(self) -> None:
        self._basic.discard_backlog()

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Nothing: what a lost reply left on the list is requeued at stop, or by recovery."""
        return Reconciled()

    def close(self) -> None:
        self._basic.close()
        self._listed.close()


def _use(taken: Counter[str], raw: str) -> bool:
    """True (and one copy used) when `raw` is among the acks `taken` for the list."""
    if taken[raw] <= 0:
        return False
    taken[raw] -= 1
    return True


class FetchFallback(abc.ABC):
    """The Manager's side: its state lives on the Manager."""

    fetcher: Fetcher
    reconciler: Reconciler
    _settler: Settler
    _fallback: Callable[[], Fetcher] | None
    _wrong_type_logged: dict[str, float]
    on_wrong_type: Callable[[], None] | None

    def _fall_back_if_unsupported(self, exc: Exception) -> bool:
        """On the fetcher thread: Redis refused reliable fetch; basic fetch from now on."""
        if not isinstance(exc, UnsupportedError) or self._fallback is None:
            return False
        if not self.fetcher.keeps_in_progress:  # basic fetch refused too: nothing to fall back to
            return False
        log.warning("reliable_fetch_unsupported", error=str(exc), note="falling back to basic fetch (BRPOP)")
        listed = self.fetcher
        # Every job still held or still to settle here was fetched onto the list (a copy counted twice,
        # held and with its ack queued, is harmless: only a payload on the list is taken off it).
        still = StillListed(listed.in_progress_key, self.reconciler.holding().elements())
        self.fetcher = FallbackFetch(self._fallback(), listed, still)
        self._settler.use_basic_fetch(still)
        return True

    def _report_wrong_type(self, queues: list[str]) -> None:
        """Logged once per minute per queue; the key guard is asked to move the key aside now."""
        now = time.monotonic()
        fresh = [q for q in queues if self._wrong_type_logged.get(q, 0.0) < now - WRONG_TYPE_LOG_EVERY_S]
        if fresh:
            log.error("queue_key_has_wrong_type", queues=fresh, note="skipped; the key guard moves it aside")
            self._wrong_type_logged.update(dict.fromkeys(fresh, now))
        self._wrong_type_found()

    def _wrong_type_found(self) -> None:
        if self.on_wrong_type is not None:
            self.on_wrong_type()
