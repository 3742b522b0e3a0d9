"""Signals reach the event loop through a self-pipe, and nowhere else.

A handler only writes the signal number to a non-blocking pipe; the loop reads it like any other event.
No logging, no locks, no state in handlers: gunicorn logged from its SIGCHLD handler and paid for it
with years of `reentrant call` crashes and deadlocks (gunicorn #2564, #2816, #3198).

The handled signals are blocked around fork (spawn.py) and across a re-exec (reexec.py): a signal that
arrives then stays pending and is delivered once the handlers are in place, never lost and never run
with a default action that would kill the supervisor.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

# Signal -> what the swarm does with it (swarm.py dispatches on the action name).
ACTIONS: dict[signal.Signals, str] = {
    signal.SIGTERM: "stop",
    signal.SIGINT: "stop",
    signal.SIGUSR1: "quiet",
    signal.SIGTSTP: "quiet",
    signal.SIGHUP: "restart",
    signal.SIGUSR2: "restart",
    signal.SIGTTIN: "dump",
    signal.SIGCHLD: "reap",
}
HANDLED: frozenset[signal.Signals] = frozenset(ACTIONS)


def block() -> set[int]:
    """Block the handled signals; returns the previous mask for `restore`."""
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)}


def restore(mask: set[int]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def unblock() -> None:
    """After a re-exec the new image starts with the handled signals blocked (the mask survives
    execve); once the handlers are installed, let the pending ones in."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


def reset_to_default() -> None:
    """In a forked child: the supervisor's handlers write to a pipe the child has closed."""
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_DFL)


class SignalPipe:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    @property
    def fileno(self) -> int:
        return self._read

    @property
    def fds(self) -> tuple[int, int]:
        return self._read, self._write

    def install(self) -> None:
        for signum in HANDLED:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        # NO LOGGING here (see the module docstring). A full pipe already holds a wake-up; repeated
        # SIGCHLDs coalesce anyway, because every reap loops over waitpid until nothing is left.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, bytes([signum]))

    def drain(self) -> list[signal.Signals]:
        """The signals received since the last call, in arrival order."""
        data = b""
        while True:
            try:
                chunk = os.read(self._read, 512)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        found: list[signal.Signals] = []
        for number in data:
            with contextlib.suppress(ValueError):
                found.append(signal.Signals(number))
        return found

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
