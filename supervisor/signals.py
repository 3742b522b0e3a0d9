"""Signals reach the event loop through a self-pipe, and nowhere else.

A handler only writes the signal number to a non-blocking pipe; the loop reads it like any other event.
No logging, no locks, no state in handlers: gunicorn logged from its SIGCHLD handler and paid for it
with years of `reentrant call` crashes and deadlocks (gunicorn #2564, #2816, #3198).

The fork server and the workers it forks start with the handled signals blocked (forkserver_client/handle.py,
forkserver/fork.py): a signal that arrives before a worker's handlers are in place stays pending and is
delivered once they are, never lost. The fork server keeps them blocked for life: signals are the
supervisor's business.
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


def unblock() -> None:
    """In a worker, once its handlers are set: let in what arrived while they were blocked."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


def reset_to_default() -> None:
    """In a forked worker: every handled signal back to its default action, before unblocking."""
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
