"""The OS side of the children: track them, read their pipes, send them signals.

swarm.py decides what should happen; this module makes it happen, and keeps the roster and the
selector in step with the processes that exist. The fork itself happens in the fork server (asked
through spawner.py); the child is ours all the same: our child to reap, our pipe to read.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
from collections.abc import Callable, Iterator

import structlog

from cogworker.worker.identity import make_identity
from supervisor import system
from supervisor.children.child import Child, Phase
from supervisor.children.roster import Roster
from supervisor.children.spawner import SpawnRequest
from supervisor.config import SwarmConfig
from supervisor.wire.child_lines import Garbage, Message

log = structlog.get_logger("cogworker.swarm")

READ_BYTES = 65536
# A child writing without end (a job printing to the inherited pipe fd, a runaway loop) must not hold
# the loop in one read: past this, the rest waits for the next turn (the selector reports it again).
MAX_READ_PER_TURN = 1 << 20


def pipe_chunks(fd: int) -> Iterator[bytes]:
    """What a child's pipe holds now, chunk by chunk, up to MAX_READ_PER_TURN bytes; a last b"" at
    end of file, or on a read error, which ends the pipe as well."""
    left = MAX_READ_PER_TURN
    while left > 0:
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        yield data
        if not data:
            return
        left -= len(data)


class ChildProcesses:
    def __init__(
        self,
        settings: SwarmConfig,
        roster: Roster,
        selector: selectors.BaseSelector,
        clock: Callable[[], float],
        send_signal: Callable[[int, int], None] = system.send_signal,
    ) -> None:
        self._settings = settings
        self._roster = roster
        self._selector = selector
        self._clock = clock
        self._send_signal = send_signal

    def adopt(self, request: SpawnRequest, pid: int, *, replaces: Child | None, current: bool) -> Child:
        """The fork server forked `pid` for `request`: track it as its slot's current child, or as a
        replacement for `replaces`."""
        now = self._clock()
        child = Child(
            pid,
            request.slot,
            make_identity(pid, request.nonce),
            request.read_fd,
            started_at=now,
            last_heard=now,
            generation=request.generation,
            purpose=request.purpose,
            quiet_requested=request.quiet,
        )
        if replaces is not None:
            child.replaces = replaces.pid
            child.ready_deadline = now + self._settings.restart_ready_timeout_s
        self.add(child, current=current)
        log.info("child_started", purpose=request.purpose, replaces=child.replaces, **child.describe())
        return child

    def add(self, child: Child, *, current: bool) -> None:
        """Track a child and listen to its pipe."""
        self._roster.add(child, current=current)
        self._selector.register(child.fd, selectors.EVENT_READ, child)

    # Pipes ----------------------------------------------------------------------------------
    def read(self, child: Child) -> list[Message | Garbage]:
        """What the child's pipe holds now, up to MAX_READ_PER_TURN bytes (a pipe holds less, so a
        reaped child's last lines are all there, unless something it left behind keeps writing);
        closes the pipe at end of file."""
        out: list[Message | Garbage] = []
        if child.fd < 0:
            return out
        for data in pipe_chunks(child.fd):
            if not data:
                self.close_pipe(child)
                break
            out += child.lines.feed(data)
        return out

    def close_pipe(self, child: Child) -> None:
        if child.fd < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(child.fd)
        os.close(child.fd)
        child.fd = -1

    # Signals --------------------------------------------------------------------------------
    def quiet(self, child: Child) -> None:
        # A launcher drops a quiet command before it is ready, so ready children get USR1 now and the
        # others when they report ready. Children forked from now on start quiet (their spawn request
        # says so).
        if child.phase is Phase.READY and not child.quiet_requested:
            self.send(child, signal.SIGUSR1)
            child.quiet_requested = True

    def dump_stacks(self) -> None:
        for child in self._roster:
            if child.handles_signals:  # before its handlers, TTIN would stop the child
                self.send(child, signal.SIGTTIN)

    def terminate(self, child: Child) -> None:
        """TERM once; SIGKILL follows at the graceful deadline if it is still alive (swarm.py)."""
        if child.term_sent_at is not None:
            return
        now = self._clock()
        self.send(child, signal.SIGTERM)
        child.term_sent_at = now
        deadline = now + self._settings.graceful_stop_timeout_s
        child.stop_deadline = min(child.stop_deadline or deadline, deadline)

    def kill(self, child: Child, reason: str) -> None:
        child.kill_reason = reason
        self.send(child, signal.SIGKILL)

    def send(self, child: Child, signum: signal.Signals) -> None:
        self._send_signal(child.pid, signum)
