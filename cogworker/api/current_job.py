"""The job running now (`cogworker.current_job()`), and what this process knows of cancelled jobs.

A running job can't be stopped from outside its thread safely, so cancelling a sync job is
cooperative (like Sidekiq's iterable jobs' `cancel!`): `current_job().cancelled` becomes true once
the worker learns of the cancel, and `current_job().raise_if_cancelled()` raises `JobCancelled`,
which ends the job as cancelled (acknowledged and counted, never retried). An `async def` job's task
is cancelled on the worker's loop as well (worker/running/async_loop.py turns that into `JobCancelled`).

The worker learns of cancels by reading the cancel record (`cogworker:cancels`) about once a second
(worker/running/cancelled.py), never per job: what it read is kept here, in memory, and a job starting
with a jid found in it ends as cancelled before its body runs (worker/running/processor.py). That also
covers a job fetched again after its process died (orphan recovery), and one fetched but not started.

No lock: `begin` registers the job before it reads `_known`, and `note_cancelled` writes `_known`
before it reads `_active`, so whichever runs second sees the other's write (each step is one dict
operation, atomic under the GIL); a cancel seen twice only sets a flag twice.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import structlog

log = structlog.get_logger("cogworker.cancel")


class JobCancelled(Exception):
    """The job was cancelled (`cogworker.cancel(jid)`).

    Raised by `CurrentJob.raise_if_cancelled()` in a running job, and where an `async def` job's task
    was cancelled. Let it propagate: a job ending with it is counted `cancelled`, not failed, not
    retried, not sent to dead. Catch it only to clean up, then raise it again.

    Attributes:
        jid: The cancelled job's id.
    """

    def __init__(self, jid: str) -> None:
        super().__init__(f"job {jid} was cancelled")
        self.jid = jid


class CurrentJob:
    """What a running job knows of itself: what `cogworker.current_job()` returns.

    Attributes:
        jid: The job's id.
        queue: The queue it was fetched from.
        name: The job's registered name.
    """

    __slots__ = ("_callbacks", "_cancelled", "jid", "name", "queue")

    def __init__(self, jid: str, queue: str, name: str) -> None:
        self.jid = jid
        self.queue = queue
        self.name = name  # the job's registered name (the payload's "class")
        self._cancelled = False
        self._callbacks: list[Callable[[], Any]] = []

    @property
    def cancelled(self) -> bool:
        """True once `cogworker.cancel(jid)` has reached the worker running the job (within about a
        second)."""
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        """Raise `JobCancelled` if the job was cancelled: call it where stopping is safe.

        Raises:
            JobCancelled: The job was cancelled. Let it propagate: the job then ends as cancelled.

        Example:
            ```python
            for page in pages:
                cogworker.current_job().raise_if_cancelled()
                export(page)
            ```
        """
        if self._cancelled:
            raise JobCancelled(self.jid)

    def on_cancel(self, callback: Callable[[], Any]) -> None:
        """Call `callback` once the job is cancelled (at once if it already is).

        The worker's event loop uses it to cancel an async job's task. The callback runs on the
        thread that learns of the cancel, not the job's; an exception from it is logged.

        Args:
            callback: A function of no arguments.
        """
        with _callbacks_mutex:
            if not self._cancelled:
                self._callbacks.append(callback)
                return
        callback()

    def cancel(self) -> None:
        """Mark the job cancelled and run its `on_cancel` callbacks.

        The worker calls it when it learns of a cancel; use `cogworker.cancel(jid)` to cancel a job.
        """
        # The callbacks run outside the lock: one may be slow.
        with _callbacks_mutex:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("cancel_callback_failed", jid=self.jid)

    def __repr__(self) -> str:
        state = f"jid={self.jid!r}, queue={self.queue!r}, name={self.name!r}, cancelled={self.cancelled}"
        return f"CurrentJob({state})"


# One lock for every job's callbacks: taken only to add one (an async job's start) or to cancel, so
# no job pays for a lock of its own.
_callbacks_mutex = threading.Lock()


def _renew_lock() -> None:
    # A preloading fork server forks workers while app threads run: one may hold this lock then
    # (docs/architecture.md, "Locks across a fork").
    global _callbacks_mutex
    _callbacks_mutex = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock)
_current: contextvars.ContextVar[CurrentJob | None] = contextvars.ContextVar("cogworker_job", default=None)
# jid -> the job running (or about to run) in this process.
_active: dict[str, CurrentJob] = {}
# jid -> when it was cancelled (Redis's clock): the cancels this process has read. Replaced whole
# (never mutated in place) by `forget_before`, so a reader never sees it change under it.
_known: dict[str, float] = {}


def current_job() -> CurrentJob:
    """Return the job running in this thread (or in this task, for an `async def` job).

    Returns:
        The running job's CurrentJob.

    Raises:
        RuntimeError: No job runs here (only a worker, or a testing mode's drain or inline run, runs
            one).

    Example:
        >>> cogworker.current_job().jid  # doctest: +SKIP
    """
    found = _current.get()
    if found is None:
        raise RuntimeError(
            "cogworker.current_job() is only available while a job runs (in a worker, or "
            "in the testing modes' drain/inline runs)"
        )
    return found


def running_job() -> CurrentJob | None:
    """The job running in this context, or None (for the worker's own code)."""
    return _current.get()


def begin(jid: str, queue: str, name: str) -> tuple[CurrentJob, contextvars.Token[CurrentJob | None]]:
    """A job starts on this thread: it is the current job, and a cancel known or learned from now
    on reaches it. End it with `end`."""
    job = CurrentJob(jid, queue, name)
    if jid:
        _active[jid] = job
        if jid in _known:
            job.cancel()
    return job, _current.set(job)


def end(job: CurrentJob, token: contextvars.Token[CurrentJob | None]) -> None:
    _current.reset(token)
    if _active.get(job.jid) is job:
        del _active[job.jid]


def note_cancelled(cancels: Iterable[tuple[str, float]]) -> list[str]:
    """Cancels read from the record: remembered, and the jobs running here flagged. Returns the jids
    of the running jobs it flagged."""
    flagged: list[str] = []
    for jid, at in cancels:
        _known[jid] = at
        job = _active.get(jid)
        if job is not None and not job.cancelled:
            job.cancel()
            flagged.append(jid)
    return flagged


def forget_before(cutoff: float) -> None:
    """Forget cancels older than the record keeps them (it trims itself the same way)."""
    global _known
    if any(at < cutoff for at in list(_known.values())):
        _known = {jid: at for jid, at in list(_known.items()) if at >= cutoff}


def known_cancelled(jid: str) -> bool:
    return jid in _known
