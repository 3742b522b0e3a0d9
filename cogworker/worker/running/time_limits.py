"""The worker's time-limit watchdog: one thread per worker process, started with the first job that
has a limit, whatever the number of jobs. (Its thread runs untraced, so coverage can't measure it:
listed with that reason in pyproject.toml; the tests prove it by behaviour.)

A sync job past its limit gets `JobTimeout` raised in its thread at its next bytecode boundary
(`PyThreadState_SetAsyncExc`). An `async def` job is cancelled on the loop instead
(api/time_limits.py `with_limit`); the watchdog only watches it for the stuck case below
(`call_async`, keyed by its slot: it has no thread of its own).

The exception must land in the job's code, never in cogworker's own middleware or settling, so the
limit is armed only around the job function's call (`call`). The watchdog fires only a run that has
not ended, and the job's thread, once its call is over, waits for a firing in progress and then
clears an exception that fired but was not raised yet (`PyThreadState_SetAsyncExc(tid, NULL)`): see
`_disarm` for that hand-off, done without a lock on the job's side (an exception landing while a
lock is held would leave it held for good). It fires once per run, so the only place it can land
after the body is `call`'s own code between the body's end and the disarm, which catches it.

The rule a sync run is judged by: it timed out when JobTimeout was raised in its thread (in its
body, or in `call` after its body returned), and also when its body returned at or past its limit
without the exception stopping it: it was inside a C call (`time.sleep`, a blocking read) that no
exception interrupts, or it caught JobTimeout and carried on. Such a run ends as JobTimeout all the
same (logged `job_time_limit_crossed`), so it fails and follows its retry policy rather than counting
as done: what a limit promises is that a run past it is not a success. A body that raised its own
error keeps it (it failed either way). A body that returned within its limit ends with its own
outcome, even when the watchdog fired just after (then the exception is cleared unraised). An
`async def` job is judged by its cancellation on the loop alone (api/time_limits.py).

An exception set for a thread that is inside a C call (a blocking read, `time.sleep`) waits there
until the call returns, and until then CPython 3.11 keeps its interpreter-wide "pending" flag set:
every other thread takes the slow path at every check, and a thread with a tracer (coverage, a
debugger) loops on that flag for good, so the whole process hangs. So a JobTimeout its thread has not
taken within DELIVERY_WAIT_S is withdrawn (the target's cleared, the flag reset by the watchdog
raising a private exception in itself: thread_exc.py), and fired again every REFIRE_S until the
thread, back in Python code, takes it, or the grace runs out (or the body returns: the rule above).
The watchdog thread runs without a tracer, so that it never loops on the flag itself.

A call no exception reaches (a C call, a lock) is still running `COGWORKER_JOB_TIMEOUT_GRACE_S`
past its limit: the watchdog marks it stuck and hands it to `on_stuck` (worker/running/stuck_jobs.py files it
as failed with JobTimeout and reports it). Its thread is unusable from then on: if its call ever
returns, `call` parks the thread for good, so it never settles, counts or acknowledges that job again.
"""

from __future__ import annotations

import asyncio
import enum
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from cogworker.api import time_limits
from cogworker.api.time_limits import JobTimeout
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running import thread_exc

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
    withdrawn: bool = False  # a JobTimeout went untaken at least once (its thread was in a C call)

    def stack(self) -> str:
        """Where its thread is now (for the log line of a stuck job)."""
        frame = sys._current_frames().get(self.tid)
        return "".join(traceback.format_stack(frame)) if frame is not None else ""


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

    async def call_async(
        self, limit_s: float, work: Work, job: dict[str, Any], slot: int, run: Callable[[], Awaitable[Any]]
    ) -> Any:
        """On the event loop: await `run()` (an async job's body, cancelled at its limit by
        api/time_limits.py `with_limit`), watched for the stuck case under `slot` (its key among the
        Manager's running jobs). Never returns for a run the watchdog gave up on as stuck: like a
        parked thread, its task waits for good, so it never settles, counts or acknowledges the job."""
        armed = Armed(slot, limit_s, work, job, False)
        self._arm(armed)
        try:
            value = await run()
        except GeneratorExit:  # its task destroyed unfinished (the process is ending): no await
            armed.left = True
            self._disarm(armed, raised=False)
            raise
        except BaseException:
            armed.left = True
            if self._disarm(armed, raised=False) is State.STUCK:
                await asyncio.get_running_loop().create_future()
            raise
        armed.left = True
        if self._disarm(armed, raised=False) is State.STUCK:
            await asyncio.get_running_loop().create_future()
        return value

    def call(
        self,
        limit_s: float,
        work: Work,
        job: dict[str, Any],
        func: Callable[[], Any],
        *,
        inject: bool,
        slot: int | None = None,
    ) -> Any:
        """On the job's thread: `func()` under `limit_s`. Returns its result or raises its error;
        raises JobTimeout when the run timed out (see the module's rule); never returns for a run the
        watchdog gave up on as stuck. `slot`: the run's key among the Manager's running jobs, when it
        is not this thread's ident (an async job carried by a bridge thread)."""
        armed = Armed(threading.get_ident() if slot is None else slot, limit_s, work, job, inject)
        result: Any = None
        failure: BaseException | None = None
        returned_at = 0.0
        try:
            try:
                self._arm(armed)
                result = func()
                returned_at = self._clock()
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
            thread_exc.park()
        if state is State.FIRED and isinstance(failure, JobTimeout):
            raise JobTimeout(time_limits.message(limit_s)).with_traceback(failure.__traceback__) from None
        if failure is not None:
            raise failure
        if inject and returned_at >= armed.started + limit_s:
            raise self._crossed(armed, returned_at - armed.started)
        return result

    @staticmethod
    def _crossed(armed: Armed, elapsed_s: float) -> JobTimeout:
        """The JobTimeout of a sync run whose body returned past its limit, not stopped by the one
        fired in its thread (see the module's rule)."""
        log.warning(
            "job_time_limit_crossed",
            jid=armed.job.get("jid"),
            job=armed.job.get("class"),
            queue=armed.work.queue,
            limit_s=armed.limit_s,
            elapsed_s=round(elapsed_s, 3),
            note="its call returned past its limit without JobTimeout stopping it (it was inside a C "
            "call, such as time.sleep or a blocking read, or caught JobTimeout): it fails with JobTimeout",
        )
        return JobTimeout(
            f"{time_limits.message(armed.limit_s)}: its call returned after {elapsed_s:.3g}s, no "
            "JobTimeout having stopped it (a C call no exception interrupts, or the job caught it)"
        )

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
            thread_exc.clear_pending()  # fired but maybe not raised yet: never in our code
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
                    first = not armed.withdrawn
                    if self._withdraw(armed, now) and first:
                        log.warning(
                            "job_time_limit_undelivered",
                            jid=armed.job.get("jid"),
                            job=armed.job.get("class"),
                            queue=armed.work.queue,
                            limit_s=armed.limit_s,
                            note=f"JobTimeout not taken within {DELIVERY_WAIT_S * 1000:g} ms: its "
                            "thread is inside a C call (time.sleep, a blocking read), or caught it and "
                            f"went on; fired again every {REFIRE_S:g}s, and the run fails with "
                            "JobTimeout when its call returns",
                        )
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
                    note="JobTimeout fired in its thread (raised at its next Python instruction)",
                )
        return stuck

    @staticmethod
    def _withdraw(armed: Armed, now: float) -> bool:
        """A JobTimeout its thread has not taken (it is in a C call): cleared, the interpreter's flag
        reset, and fired again in REFIRE_S (lock held, on the watchdog thread, never traced). False
        when the call had left meanwhile: nothing done."""
        armed.deciding = True
        try:
            if armed.ended or armed.left:
                return False
            armed.withdrawn = True
            thread_exc.set_async_exc(armed.tid, None)
            thread_exc.clear_pending()  # raised in the watchdog itself: only a raise resets the flag
            armed.state = State.ARMED
            armed.fired_at = -1.0  # withdrawn: the next firing is a refire, logged once already
            armed.deadline = now + REFIRE_S
            return True
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
                thread_exc.set_async_exc(armed.tid, JobTimeout)
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
