"""The one-queue wait turn: how the fetcher hands its blocking wait (BLMOVE) to an idle job thread.

With one queue and nothing to fetch, an idle job thread blocks on the queue itself and runs the job
it gets, so a pushed job starts without waiting for a second thread to wake. The manager (worker/manager.py)
puts WAIT_TURN on its work queue instead of a job; the turn counts as a queued job while it is out.
A quiet, stop or pause that arrives while the thread is blocked makes it give the job back unstarted,
and a stop waits for that give-back (`_end_wait_turn`) before it hands anything else back.
"""

from __future__ import annotations

import abc
import queue
import threading
import time
from dataclasses import dataclass

from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import Fetcher, Waited, Work
from cogworker.worker.recovering.reconcile import Reconciler

BLOCK_TIMEOUT_S = 1.0
OUTAGE_RETRY_S = 1.0


class WaitTurn:
    """Put on the work queue instead of a job: "block on the queue yourself, run what comes"."""


WAIT_TURN = WaitTurn()


@dataclass(slots=True)
class Running:
    work: Work
    started_at: float


class WaitTurnHandoff(abc.ABC):
    """The wait turn's half of the Manager: its state lives on the Manager, under `_cond`, and the
    two Manager methods it calls are declared abstract below."""

    fetcher: Fetcher
    reconciler: Reconciler
    _cond: threading.Condition
    _work: queue.SimpleQueue[Work | WaitTurn | None]
    _queued: int
    _running: dict[int, Running]
    _quiet: bool
    _stopping: bool
    _turn_open: bool  # a blocking wait is handed out (one queue, idle)
    _turn_blocking: bool  # ... and a job thread is inside it
    _turn_error: Exception | None
    _outages: Outages
    _wake: threading.Event

    @abc.abstractmethod
    def _give_back(self, work: Work) -> None: ...

    @abc.abstractmethod
    def _fall_back_if_unsupported(self, exc: Exception) -> bool: ...

    def _hand_wait_to_a_job_thread(self) -> bool:
        """One queue: an idle job thread blocks on it (BLMOVE) and runs the job it gets itself, so
        a pushed job starts without waiting for a second thread to wake. The fetcher waits for the
        turn to end, then fetches for the other threads as usual."""
        with self._cond:
            self._queued += 1  # the turn holds a thread, as a handed-over job would
            self._turn_open = True
            self._turn_error = None
        self._work.put(WAIT_TURN)
        with self._cond:
            while self._turn_open and not self._stopping:
                self._cond.wait(timeout=BLOCK_TIMEOUT_S)
            error, self._turn_error = self._turn_error, None
        if error is not None and not self._fall_back_if_unsupported(error):
            self._outages.report("Fetch", error)
            self._wake.wait(OUTAGE_RETRY_S)
        return True

    def _end_wait_turn(self, until: float) -> None:
        """Let a thread blocked on the queue come back (it gives back what it got) before the caller
        hands jobs back to the queue: else its BLMOVE could take one of them, just before exit."""
        with self._cond:
            while self._turn_blocking and (left := until - time.monotonic()) > 0:
                self._cond.wait(timeout=left)

    def _take_wait_turn(self, ident: int) -> Work | None:
        """On a job thread: the blocking wait. Returns the job to run (already counted as running
        here), or None (timed out, failed, or quiet/stop/pause came meanwhile)."""
        waited = Waited()
        error: Exception | None = None
        with self._cond:
            skip = self._quiet or self._stopping
            self._turn_blocking = not skip
        if not skip:
            try:
                waited = self.fetcher.wait(BLOCK_TIMEOUT_S)
            except Exception as exc:
                error = exc
                # Redis may have moved a job onto our list and lost the reply.
                self.reconciler.lost_reply()
        work = waited.work
        if work is not None:
            self.reconciler.hold([work])
        with self._cond:
            self._queued -= 1
            self._turn_open = False
            self._turn_error = error
            keep = work is not None and not (self._quiet or self._stopping or waited.paused)
            if work is not None and keep:
                self._running[ident] = Running(work, time.time())
            if work is None or keep:
                self._turn_blocking = False
            self._cond.notify_all()
        if work is None or keep:
            return work
        # Quiet, stop or a pause of the queue arrived while we were blocked: this job was never ours
        # to start. A stop waits for this give-back (_turn_blocking) before it hands anything back.
        try:
            self._give_back(work)
        finally:
            with self._cond:
                self._turn_blocking = False
                self._cond.notify_all()
        return None
