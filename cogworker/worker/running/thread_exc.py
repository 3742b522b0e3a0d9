"""Raising an exception in another thread, and taking back one not raised yet: the CPython calls the
time-limit watchdog (time_limits.py) is built on, with what they need to leave the interpreter as
they found it. (Coverage sees few of these lines: they run on the watchdog thread, which runs
untraced, or as an exception is raised in a thread; listed with that reason in pyproject.toml, and
proved by behaviour in tests/unit/worker/running/test_time_limits.py.)
"""

from __future__ import annotations

import ctypes
import threading
import time


def set_async_exc(tid: int, exc: type[BaseException] | None) -> int:
    """Raise `exc` in thread `tid` at its next bytecode boundary; None clears one not yet raised."""
    return int(
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(tid), ctypes.py_object(exc) if exc is not None else None
        )
    )


class Flush(BaseException):
    """Raised by a thread in itself to take the place of a JobTimeout not raised yet (`clear_pending`)."""


def clear_pending() -> None:
    """On the job's thread: make sure no JobTimeout is left pending for it. `SetAsyncExc(tid, NULL)`
    alone would clear it but leave the interpreter's "async exception pending" flag set for good (on
    CPython 3.11 and 3.12 only a raise resets it): every thread of the process would then take the
    slow path at every check, and under a tracer (a debugger, coverage) loop forever. So the pending
    exception is replaced by a private one that this thread raises in itself, at once, and catches."""
    try:
        set_async_exc(threading.get_ident(), Flush)
        for _ in range(3):  # a check point: CPython raises a pending exception at the first
            time.sleep(0)
    except Flush:
        return
    set_async_exc(threading.get_ident(), None)  # not raised (another interpreter?): clear it at least


def park() -> None:
    """A stuck job's thread that came back: it never returns into the middleware or the settling
    (the job was filed for it). It is a daemon thread and ends with the process, which is replaced."""
    while True:
        try:
            threading.Event().wait()
        except BaseException:  # nothing may make it return
            continue
