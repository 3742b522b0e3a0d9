"""The Manager's two-phase stop: `quiet` (stop fetching), then `stop(deadline)` (give back the jobs
not started, wait for running ones until the deadline, send the last acknowledgements).

What a stop hands back goes to its queue at once; what it cannot (Redis away) stays on the process's
in-progress list, where the launcher's requeue at the end of the stop finds it. A running job is
never abandoned before the deadline: "it is worse to lose a job than to run it twice".

The order matters. The fetcher thread is stopped first, so no fetch races the give-back; then a job
thread blocked on the queue in a wait turn (worker/fetching/wait_turn.py) is let back, since its
BLMOVE could take a job just handed back; only then are the unstarted jobs given back and the job
threads told to end.
"""

from __future__ import annotations

import abc
import queue
import threading
import time

from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import Fetcher, Work
from cogworker.worker.fetching.wait_turn import BLOCK_TIMEOUT_S, Running, WaitTurn
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.running.time_limits import TimeLimits
from cogworker.worker.settling.settle import Settler


class ManagerStop(abc.ABC):
    """The stop's half of the Manager: its state lives on the Manager, under `_cond`, and the Manager
    methods it calls are declared abstract below (the Manager's other halves define them)."""

    fetcher: Fetcher
    reconciler: Reconciler
    limits: TimeLimits
    _cond: threading.Condition
    _work: queue.SimpleQueue[Work | WaitTurn | None]
    _queued: int
    _running: dict[int, Running]
    _quiet: bool
    _stopping: bool
    _turn_open: bool
    _turn_blocking: bool
    _wake: threading.Event
    _threads: list[threading.Thread]
    _fetcher_thread: threading.Thread | None
    _stuck: set[int]
    _settler: Settler
    _outages: Outages

    @abc.abstractmethod
    def _give_back(self, work: Work) -> None: ...

    @abc.abstractmethod
    def _end_wait_turn(self, until: float) -> None: ...

    @abc.abstractmethod
    def _give_back_async_unstarted(self) -> None: ...

    @abc.abstractmethod
    def _stop_async(self, deadline: float) -> None: ...

    def quiet(self) -> None:
        with self._cond:
            self._quiet = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            if not self._stopping:
                self._quiet = False
            self._cond.notify_all()

    @property
    def is_quiet(self) -> bool:
        return self._quiet

    @property
    def is_stopping(self) -> bool:
        return self._stopping

    @property
    def may_have_strays(self) -> bool:
        """After stop: a lost reply no reconcile has answered yet, or a thread still blocked on the
        queue, may leave a job on our list (or still move one there) after the final requeue."""
        with self._cond:
            blocking = self._turn_blocking
        return blocking or self.reconciler.unanswered

    def stop(self, deadline: float) -> list[Work]:
        """Stop fetching, give back unstarted jobs, wait for running ones until `deadline`
        (monotonic). Returns the jobs still running then."""
        with self._cond:
            self._stopping = True
            self._quiet = True
            self._cond.notify_all()
        self._wake.set()
        if self._fetcher_thread is not None:
            self._fetcher_thread.join(timeout=max(0.0, deadline - time.monotonic()) + BLOCK_TIMEOUT_S)
        self._end_wait_turn(time.monotonic() + BLOCK_TIMEOUT_S + 1)
        self._give_back_unstarted()
        self._give_back_async_unstarted()
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            if thread.ident not in self._stuck:  # given up on: it may never return
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._stop_async(deadline)
        self.limits.close()
        # Kept results first: each written one queues its job's ack, which the flush then sends.
        self._settler.retry_pending()
        self.flush_acks()
        with self._cond:
            return [r.work for r in self._running.values()]

    def flush_acks(self) -> None:
        if not self._settler.pending_acks:
            return
        acks = self._settler.take_acks()
        try:
            result = self.fetcher.fetch(0, acks)
        except Exception as exc:
            self._settler.return_acks(acks)
            self._outages.report("Fetch", exc)
            return
        # Sharded: a partition that did not answer keeps its acks for the final flush (handover.py).
        self._settler.return_acks(result.unsent_acks)

    def _give_back_unstarted(self) -> None:
        while True:
            try:
                work = self._work.get_nowait()
            except queue.Empty:
                return
            if work is None:
                continue
            with self._cond:
                self._queued -= 1
                if isinstance(work, WaitTurn):
                    self._turn_open = False
                    continue
            self._give_back(work)
