"""The worker's time-limit watchdog: one thread per worker process, started with the first job that
has a limit, whatever the number of jobs. (Its thread runs untraced, so coverage can't measure it:
listed with that reason in pyproject.toml; the tests prove it by behaviour.)

A sync job past its limit gets `JobTimeout` raised in its thread at its next bytecode boundary
(`PyThreadState_SetAsyncExc`). An `async def` job is cancelled on the loop instead
(api/time_limits.py `with_limit`); the watchdog only watches its carrier for the stuck case below.

The exception must land in the job's code, never in cogworker's own middleware or settling, so the
limit is armed only around the job function's call (`call`). The watchdog fires only a run that has
not ended, and the job's thread, once its call is over, waits for a firing in progress and then
clears an exception that fired but was not raised yet (`PyThreadState_SetAsyncExc(tid, NULL)`): see
`_disarm` for that hand-off, done without a lock on the job's side (an exception landing while a
lock is held would leave it held for good). It fires once per run, so the only place it can land
after the body is `call`'s own code between the body's end and the disarm, which catches it.

The rule a run is judged by: it timed out when JobTimeout was raised in its thread (in its body, or
in `call` after its body returned); one that fired but was cleared before it was raised ends with its
own outcome (its body had returned: its work is done).

An exception set for a thread that is inside a C call (a blocking read, `time.sleep`) waits there
until the call returns, and until then CPython 3.11 keeps its interpreter-wide "pending" flag set:
every other thread takes the slow path at every check, and a thread with a tracer (coverage, a
debugger) loops on that flag for good, so the whole process hangs. So a JobTimeout its thread has not
taken within DELIVERY_WAIT_S is withdrawn (the target's cleared, the flag reset by the watchdog
raising a private exception in itself), and fired again every REFIRE_S until the thread, back in
Python code, takes it, or the grace runs out. The watchdog thread runs without a tracer, so that it
never loops on the flag itself.

A call no exception reaches (a C call, a lock) is still running `COGWORKER_JOB_TIMEOUT_GRACE_S`
past its limit: the watchdog marks it stuck and hands it to `on_stuck` (worker/stuck_jobs.py files it
as failed with JobTimeout and reports it). Its thread is unusable from then on: if its call ever
returns, `call` parks the thread for good, so it never settles, counts or acknowledges that job again.
"""

from __future__ import annotations

import ctypes
import enum
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from cogworker.api import time_limits
from cogworker.api.time_limits import JobTimeout
from cogworker.worker.fetch import Work

log = structlog.get_logger("cogworker.job")

# How long a JobTimeout may wait, untaken, for a thread inside a C call before it is withdrawn; and
# how often it is fired again while the run goes on past its limit (see the module's docstring).
DELIVERY_WAIT_S = 0.05
REFIRE_S = 0.5


class State(enum.Enum):
    ARMED = "armed"  # the job's function is running within its limit
    FIRED = "fired"  # past its limit: JobTimeout was set for its thread (sync jobs)
    STUCK = "stuck"  # past its limit and the grace: filed as failed; its thread is given up on


@dataclass(eq=False, slots=True)
class Armed:
    """One run under a limit; made before it is armed, so arming itself can't be interrupted half way."""

    tid: int
    limit_s: float
    work: Work
    job: dict[str, Any]
    inject: bool  # a sync job: raise JobTimeout in its thread (an async job is cancelled on the loop)
    started: float = 0.0
    deadline: float = 0.0
    stuck_at: float = 0.0
    state: State = State.ARMED
    # The two flags of the hand-off between the job's thread and the watchdog (`_disarm`, `_settle`).
    ended: bool = field(default=False)
    deciding: bool = field(default=False)
    left: bool = field(default=False)  # the job's call has returned or raised (set by its thread)
    fired_at: float = 0.0  # when the JobTimeout now pending was set (0: none pending)

    def stack(self) -> str:
        """Where its thread is now (for the log line of a stuck job)."""
        frame = sys._current_frames().get(self.tid)
        return "".join(traceback.format_stack(frame)) if frame is not None else ""


def _set_async_exc(tid: int, exc: type[BaseException] | None) -> int:
    """Raise `exc` in thread `tid` at its next bytecode boundary; None clears one not yet raised."""
    return int(
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(tid), ctypes.py_object(exc) if exc is not None else None
        )
    )


class _Flush(BaseException):
    """Raised by a thread in itself to take the place of a JobTimeout not raised yet (`_clear_pending`)."""


def _clear_pending() -> None:
    """On the job's thread: make sure no JobTimeout is left pending for it. `SetAsyncExc(tid, NULL)`
    alone would clear it but leave the interpreter's "async exception pending" flag set for good (on
    CPython 3.11 and 3.12 only a raise resets it): every thread of the process would then take the
    slow path at every check, and under a tracer (a debugger, coverage) loop forever. So the pending
    exception is replaced by a private one that this thread raises in itself, at once, and catches."""
    try:
        _set_async_exc(threading.get_ident(), _Flush)
        for _ in range(3):  # a check point: CPython raises a pending exception at the first
            time.sleep(0)
    except _Flush:
        return
    _set_async_exc(threading.get_ident(), None)  # not raised (another interpreter?): clear it at least


def _park() -> None:
    """A stuck job's thread that came back: it never returns into the middleware or the settling
    (the job was filed for it). It is a daemon thread and ends with the process, which is replaced."""
    while True:
        try:
            threading.Event().wait()
        except BaseException:  # nothing may make it return
            continue


class TimeLimits:
    def __init__(
        self,
        default_s: float | None,
        grace_s: float,
        on_stuck: Callable[[Armed], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default_s = default_s
        self.grace_s = grace_s
        self.on_stuck = on_stuck
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, Armed] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def limit_for(self, job: dict[str, Any]) -> float | None:
        """This run's limit: the payload's `timeout_s`, else COGWORKER_JOB_TIMEOUT_S (None: none)."""
        return time_limits.limit_for(job, self.default_s)

    @property
    def armed(self) -> int:
        with self._cond:
            return len(self._armed)

    def call(
        self, limit_s: float, work: Work, job: dict[str, Any], func: Callable[[], Any], *, inject: bool
    ) -> Any:
        """On the job's thread: `func()` under `limit_s`. Returns its result or raises its error;
        raises JobTimeout when the run timed out (see the module's rule); never returns for a run the
        watchdog gave up on as stuck."""
        armed = Armed(threading.get_ident(), limit_s, work, job, inject)
        result: Any = None
        failure: BaseException | None = None
        try:
            try:
                self._arm(armed)
                result = func()
                armed.left = True
            except BaseException as exc:  # the job's own error, or the JobTimeout raised in it
                armed.left = True
                failure = exc
            state = self._disarm(armed, raised=isinstance(failure, JobTimeout))
        except JobTimeout as exc:
            # Fired just as the body ended and raised here, in our own code: the run timed out. None
            # is fired once the call has left (`left`), so nothing more can land after this.
            armed.left = True
            failure = exc
            state = self._disarm(armed, raised=True)
        if state is State.STUCK:
            _park()
        if state is State.FIRED and isinstance(failure, JobTimeout):
            raise JobTimeout(time_limits.message(limit_s)).with_traceback(failure.__traceback__) from None
        if failure is not None:
            raise failure
        return result

    def _arm(self, armed: Armed) -> None:
        now = self._clock()
        armed.started = now
        armed.deadline = now + armed.limit_s
        armed.stuck_at = armed.deadline + self.grace_s
        with self._cond:
            self._armed[armed.tid] = armed
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name="time-limits", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _disarm(self, armed: Armed, *, raised: bool) -> State:
        """On the job's thread, taking no lock: JobTimeout may land anywhere in here (`call` catches
        it), and a lock held when it lands would never be released. Instead two flags, each written by
        one side and read by the other (the GIL orders them): the job says it `ended`, then waits
        while the watchdog is `deciding`; the watchdog says it is deciding, then acts only if the job
        has not ended. So either the watchdog saw the end and does nothing, or the job sees what it
        did (FIRED: clear an exception not raised yet; STUCK: park). Running twice (when the exception
        landed in the first) changes nothing the first didn't. `raised`: `call` caught the JobTimeout,
        so nothing is pending."""
        armed.ended = True
        while armed.deciding:
            time.sleep(0)
        self._armed.pop(armed.tid, None)  # its own entry: a thread has one run at a time
        if armed.inject and armed.state is not State.ARMED and not raised:
            _clear_pending()  # fired but maybe not raised yet: never in our code
        return armed.state

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    # The watchdog thread -------------------------------------------------------------------
    def _watch(self) -> None:
        # Never traced (coverage, a debugger): a traced thread loops on a pending exception's flag.
        sys.settrace(None)
        while True:
            with self._cond:
                if self._closed:
                    return
                stuck = self._due(self._clock())
                if not stuck:
                    wait = self._next_wait(self._clock())
                    self._cond.wait(wait)
                    continue
            for armed in stuck:
                # On a thread of its own: filing takes Redis round trips the watchdog must not wait
                # on, and that thread may be traced (nothing is pending for a stuck run any more).
                threading.Thread(
                    target=self._report_stuck, args=(armed,), name="stuck-job", daemon=True
                ).start()

    def _due(self, now: float) -> list[Armed]:
        """Fire the runs past their limit and take out those past the grace (lock held: `_arm`
        waits, so an entry taken out here is never a newer run of the same thread)."""
        stuck = []
        for armed in list(self._armed.values()):
            if now >= armed.stuck_at:
                if armed.inject and armed.state is State.FIRED and armed.fired_at > 0 and not armed.left:
                    self._withdraw(armed, now)  # nothing left pending for a thread given up on
                if self._settle(armed, State.STUCK):
                    if self._armed.get(armed.tid) is armed:
                        self._armed.pop(armed.tid, None)
                    stuck.append(armed)
            elif armed.inject and armed.state is State.FIRED and armed.fired_at:
                if now >= armed.fired_at + DELIVERY_WAIT_S and not armed.left:
                    self._withdraw(armed, now)
            elif armed.inject and armed.state is State.ARMED and now >= armed.deadline:
                refire = armed.fired_at < 0
                if not self._settle(armed, State.FIRED):
                    continue
                armed.fired_at = now
                if refire:
                    continue
                log.warning(
                    "job_time_limit_reached",
                    jid=armed.job.get("jid"),
                    job=armed.job.get("class"),
                    queue=armed.work.queue,
                    limit_s=armed.limit_s,
                    note="JobTimeout raised in its thread",
                )
        return stuck

    @staticmethod
    def _withdraw(armed: Armed, now: float) -> None:
        """A JobTimeout its thread has not taken (it is in a C call): cleared, the interpreter's flag
        reset, and fired again in REFIRE_S (lock held, on the watchdog thread, never traced)."""
        armed.deciding = True
        try:
            if armed.ended or armed.left:
                return
            _set_async_exc(armed.tid, None)
            _clear_pending()  # raised in the watchdog itself: only a raise resets the flag
            armed.state = State.ARMED
            armed.fired_at = -1.0  # withdrawn: the next firing is a refire, logged once already
            armed.deadline = now + REFIRE_S
        finally:
            armed.deciding = False

    @staticmethod
    def _settle(armed: Armed, state: State) -> bool:
        """The watchdog's side of the hand-off (see `_disarm`): move a run still running to `state`
        (FIRED raises JobTimeout in its thread). False when the job ended first: nothing done."""
        armed.deciding = True
        try:
            if armed.ended:
                return False
            armed.state = state
            if state is State.FIRED:
                _set_async_exc(armed.tid, JobTimeout)
            return True
        finally:
            armed.deciding = False

    def _next_wait(self, now: float) -> float | None:
        dues = [self._next_due(a) for a in list(self._armed.values()) if not a.ended]
        return max(0.0, min(dues) - now) if dues else None

    @staticmethod
    def _next_due(armed: Armed) -> float:
        if armed.inject and armed.state is State.ARMED:
            return min(armed.deadline, armed.stuck_at)
        if armed.inject and armed.state is State.FIRED and armed.fired_at > 0 and not armed.left:
            return min(armed.fired_at + DELIVERY_WAIT_S, armed.stuck_at)
        return armed.stuck_at

    def _report_stuck(self, armed: Armed) -> None:
        if self.on_stuck is None:
            return
        try:
            self.on_stuck(armed)
        except Exception:
            log.exception("stuck_job_report_failed", jid=armed.job.get("jid"))
