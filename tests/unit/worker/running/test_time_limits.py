"""The time-limit watchdog in process (cogworker/worker/running/time_limits.py): JobTimeout raised in a sync
job's thread past its limit, never in the code around the job's call, even when the limit falls just
as the job returns; a job no exception reaches is given up on as stuck after the grace, reported
once, and its thread, if it comes back, never returns into the caller."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any

import pytest

from cogworker.api.time_limits import JobTimeout
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.time_limits import Armed, State, TimeLimits
from tests.support.redis_server import wait_until

WORK = Work("default", '{"class": "x.y", "jid": "j1"}')
JOB = {"class": "x.y", "jid": "j1"}


def spin(seconds: float) -> str:
    """Pure Python for `seconds`: every bytecode boundary is a place JobTimeout can land."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return "done"


def test_a_sync_job_past_its_limit_gets_job_timeout_in_its_thread() -> None:
    limits = TimeLimits(None, grace_s=5.0)
    started = time.monotonic()
    with pytest.raises(JobTimeout, match=r"time limit of 0\.2s") as caught:
        limits.call(0.2, WORK, JOB, lambda: spin(5.0), inject=True)
    assert 0.2 <= time.monotonic() - started < 2.0
    # The backtrace shows where the job was interrupted.
    frames = [f.name for f in _frames(caught.value)]
    assert "spin" in frames
    assert limits.armed == 0


def test_a_job_within_its_limit_returns_and_nothing_lands_later() -> None:
    limits = TimeLimits(None, grace_s=5.0)
    assert limits.call(1.0, WORK, JOB, lambda: spin(0.05), inject=True) == "done"
    spin(1.5)  # past the limit it had: nothing was left armed to fire
    assert limits.armed == 0


def test_the_jobs_own_error_is_raised_as_it_is() -> None:
    limits = TimeLimits(None, grace_s=5.0)

    def fail() -> None:
        raise ValueError("own")

    with pytest.raises(ValueError, match="own"):
        limits.call(1.0, WORK, JOB, fail, inject=True)


def test_the_default_applies_and_a_payload_limit_overrides_it() -> None:
    limits = TimeLimits(30.0, grace_s=5.0)
    assert limits.limit_for({}) == 30.0
    assert limits.limit_for({"timeout_s": 2}) == 2.0
    assert limits.limit_for({"timeout_s": "2"}) == 30.0  # not a number: ignored
    assert limits.limit_for({"timeout_s": 0}) == 30.0
    assert TimeLimits(None, grace_s=5.0).limit_for({}) is None


def test_the_limit_falling_as_jobs_return_never_lands_outside_the_call() -> None:
    """The race: many jobs whose run is about as long as their limit, on several threads at once.
    Each call either returns or raises JobTimeout, exactly once; the code after it (standing for the
    middleware and the settling) runs on and never sees a JobTimeout."""
    limits = TimeLimits(None, grace_s=30.0)
    outcomes: dict[str, int] = {"ok": 0, "timeout": 0}
    leaked: list[str] = []
    lock = threading.Lock()
    per_thread = 150

    def worker(index: int) -> None:
        for n in range(per_thread):
            duration = 0.004 + (n % 5) * 0.001
            try:
                try:
                    limits.call(0.006, WORK, JOB, lambda d=duration: spin(d), inject=True)  # type: ignore[misc]
                    kind = "ok"
                except JobTimeout:
                    kind = "timeout"
                spin(0.004)  # the caller's own work after the job: nothing may land here
                with lock:
                    outcomes[kind] += 1
            except JobTimeout:
                with lock:
                    leaked.append(f"{index}:{n}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not leaked
    assert outcomes["ok"] + outcomes["timeout"] == 6 * per_thread
    assert outcomes["timeout"] > 0 and outcomes["ok"] > 0  # the limit really fell around the returns
    assert limits.armed == 0


def test_a_limit_falling_after_the_body_returned_lands_in_the_call_and_the_run_timed_out() -> None:
    """The race made certain: the watchdog fires the moment the body has returned, as the job's
    thread enters the disarm (a trace function puts the fire exactly there). The exception is raised
    in the disarm, caught by `call`, the run counts as timed out, and nothing lands after `call`."""
    limits = TimeLimits(None, grace_s=30.0)
    fired: list[Armed] = []
    disarm_code = TimeLimits._disarm.__code__

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is disarm_code and not fired:
            armed = frame.f_locals["armed"]
            fired.append(armed)
            assert TimeLimits._settle(armed, State.FIRED)  # as the watchdog would, at this instant
        return None

    # Put back whatever traced this thread before (coverage's tracer under `make test`): leaving
    # None would stop coverage for every test after this one in the process.
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(JobTimeout, match="time limit of 60s") as caught:
            limits.call(60.0, WORK, JOB, lambda: "returned", inject=True)
    finally:
        sys.settrace(previous)
    assert fired and fired[0].state is State.FIRED
    # Raised in cogworker's own disarm (after the body returned: no frame of it), and caught there.
    names = [f.name for f in traceback.extract_tb(caught.value.__traceback__)]
    assert "_disarm" in names and "<lambda>" not in names
    spin(0.2)  # and nothing more is pending for this thread
    assert limits.armed == 0


def test_a_job_no_exception_reaches_is_reported_stuck_once_and_never_returns() -> None:
    reported: list[Armed] = []
    limits = TimeLimits(None, grace_s=0.3, on_stuck=reported.append)
    read_end, write_end = os.pipe()
    returned: list[Any] = []

    def job() -> bytes:
        return os.read(read_end, 1)  # blocks in C: JobTimeout can't be raised until it returns

    def thread_body() -> None:
        try:
            returned.append(limits.call(0.2, WORK, JOB, job, inject=True))
        except BaseException as exc:
            returned.append(exc)

    thread = threading.Thread(target=thread_body, daemon=True)
    started = time.monotonic()
    thread.start()
    wait_until(lambda: reported, timeout=5, message="the stuck report")
    assert time.monotonic() - started >= 0.5  # the limit plus the grace
    [armed] = reported
    assert armed.state is State.STUCK and armed.job is JOB and armed.tid == thread.ident
    assert "os.read" in armed.stack() or "job" in armed.stack()
    os.write(write_end, b"x")  # the call returns at last...
    time.sleep(0.5)  # (a negative check: give it the time it would need to come back)
    assert thread.is_alive() and returned == []  # ...but its thread parks: nothing returns into the caller
    assert len(reported) == 1 and limits.armed == 0
    os.close(read_end)
    os.close(write_end)


def test_a_job_that_swallows_job_timeout_is_stuck_after_the_grace() -> None:
    reported: list[Armed] = []
    limits = TimeLimits(None, grace_s=0.3, on_stuck=reported.append)
    swallowed: list[int] = []

    def stubborn() -> None:
        while True:
            try:
                spin(0.01)
            except JobTimeout:
                swallowed.append(1)

    threading.Thread(target=lambda: limits.call(0.1, WORK, JOB, stubborn, inject=True), daemon=True).start()
    wait_until(lambda: reported, timeout=5, message="the stuck report")
    assert swallowed == [1]  # raised once, swallowed, then given up on


def test_an_async_carrier_is_never_interrupted_but_is_reported_stuck_after_the_grace() -> None:
    reported: list[Armed] = []
    limits = TimeLimits(None, grace_s=0.2, on_stuck=reported.append)
    release = threading.Event()
    threading.Thread(
        target=lambda: limits.call(0.1, WORK, JOB, lambda: release.wait(10), inject=False), daemon=True
    ).start()
    wait_until(lambda: reported, timeout=5, message="the stuck report")
    assert reported[0].inject is False
    release.set()


def _frames(exc: BaseException) -> list[Any]:
    return list(traceback.extract_tb(exc.__traceback__))


def test_a_run_that_swallowed_its_job_timeout_ends_as_job_timeout_and_leaves_nothing_pending() -> None:
    """The job caught JobTimeout and returned past its limit: the run still ends as JobTimeout, and
    the interpreter is left as it was (a cleared exception must not leave the "pending" flag set:
    under a tracer every call would then loop forever, which the traced call below would show as a
    hang)."""
    limits = TimeLimits(None, grace_s=30.0)
    swallowed: list[bool] = []

    def swallow() -> str:
        try:
            spin(5.0)
        except JobTimeout:
            swallowed.append(True)
            return "swallowed"
        return "finished"

    with pytest.raises(JobTimeout, match=r"time limit of 0\.1s: its call returned after"):
        limits.call(0.1, WORK, JOB, swallow, inject=True)
    assert swallowed == [True]
    calls: list[str] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        calls.append(event)
        return None

    # Put back whatever traced this thread before (coverage's tracer under `make test`): leaving
    # None would stop coverage for every test after this one in the process.
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        assert spin(0.01) == "done"
    finally:
        sys.settrace(previous)
    assert "call" in calls


def test_a_job_in_a_c_call_past_its_limit_stalls_no_traced_thread_and_times_out_once_back() -> None:
    """CPython 3.11 keeps a pending exception's flag set while its thread is inside a C call, and a
    traced thread (coverage, a debugger) loops on that flag: the watchdog withdraws an exception not
    taken within DELIVERY_WAIT_S and fires it again once the job is back in Python code."""
    limits = TimeLimits(None, grace_s=30.0)
    read_end, write_end = os.pipe()
    returned: list[Any] = []
    progress: list[float] = []
    stop = threading.Event()

    def job() -> str:
        os.read(read_end, 1)  # in C past its limit
        return spin(5.0)  # back in Python: the next firing lands here

    def traced_loop() -> None:
        sys.settrace(lambda frame, event, arg: None)
        while not stop.is_set():
            progress.append(time.monotonic())
            spin(0.001)

    def thread_body() -> None:
        try:
            returned.append(limits.call(0.1, WORK, JOB, job, inject=True))
        except BaseException as exc:
            returned.append(exc)

    watcher = threading.Thread(target=traced_loop, daemon=True)
    worker = threading.Thread(target=thread_body, daemon=True)
    worker.start()
    watcher.start()
    fired_by = time.monotonic() + 0.3  # past the limit, and past the withdrawal
    wait_until(
        lambda: progress and progress[-1] > fired_by + 0.2, timeout=5, message="a traced thread to go on"
    )
    os.write(write_end, b"x")
    wait_until(lambda: returned, timeout=5, message="the job to end")
    stop.set()
    assert isinstance(returned[0], JobTimeout)
    assert limits.armed == 0
    os.close(read_end)
    os.close(write_end)


def test_a_job_sleeping_past_its_limit_in_a_c_call_times_out_when_the_sleep_returns() -> None:
    """`time.sleep` past the limit: the JobTimeout fired in its thread can't be raised inside the
    sleep and is withdrawn; the sleep returns, the body ends, and the run is a JobTimeout all the
    same, with nothing left pending. (A refire may land just as the sleep returns, about one time
    in ten: then it is raised in the body, and stops it there.)"""
    limits = TimeLimits(None, grace_s=30.0)
    started = time.monotonic()
    ended: list[bool] = []

    def body() -> None:
        time.sleep(1.0)
        ended.append(True)

    with pytest.raises(JobTimeout, match=r"time limit of 0\.2s") as caught:
        limits.call(0.2, WORK, JOB, body, inject=True)
    assert time.monotonic() - started >= 1.0
    if ": its call returned after" in str(caught.value):  # the body ended, no JobTimeout raised in it
        assert ended and "a C call no exception interrupts" in str(caught.value)
    spin(0.7)  # past a refire: nothing lands after the call
    assert limits.armed == 0


def test_a_body_returning_within_its_limit_keeps_its_outcome_even_if_the_clock_is_late() -> None:
    """Judged by when the body returned, on the watchdog's clock: a run whose body returned before
    its limit is not a JobTimeout, whenever the caller gets to look."""
    now = [100.0]
    limits = TimeLimits(None, grace_s=30.0, clock=lambda: now[0])

    def body() -> str:
        now[0] += 0.999  # the body took 0.999 s of a 1 s limit
        return "done"

    assert limits.call(1.0, WORK, JOB, body, inject=True) == "done"

    def late() -> str:
        now[0] += 1.0  # exactly its limit: crossed
        return "done"

    with pytest.raises(JobTimeout, match=r"returned after 1s"):
        limits.call(1.0, WORK, JOB, late, inject=True)
    limits.close()
