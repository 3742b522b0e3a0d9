"""The OS side of the children: fork them, read their pipes, send them signals.

swarm.py decides what should happen; this module makes it happen, and keeps the roster and the
selector in step with the processes that exist.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
from collections.abc import Callable

import structlog

from cogworker.settings import Settings
from supervisor.child import Child, Phase
from supervisor.hooks import SwarmHooks
from supervisor.protocol import Garbage, Message
from supervisor.roster import Roster
from supervisor.signals import SignalPipe
from supervisor.spawn import spawn

log = structlog.get_logger("cogworker.swarm")

READ_BYTES = 65536


class ChildProcesses:
    def __init__(
        self,
        settings: Settings,
        roster: Roster,
        selector: selectors.BaseSelector,
        signal_pipe: SignalPipe,
        hooks: SwarmHooks,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._roster = roster
        self._selector = selector
        self._signal_pipe = signal_pipe
        self._hooks = hooks
        self._clock = clock

    def fork(
        self,
        slot: int,
        purpose: str,
        *,
        generation: int,
        app_loaded: bool,
        quiet: bool,
        replaces: Child | None = None,
    ) -> Child:
        """Fork a child for `slot`: its current child, or a replacement for `replaces`. Raises OSError."""
        spawned = spawn(
            self._settings, slot, app_loaded=app_loaded, quiet=quiet, close_in_child=self._close_in_child
        )
        now = self._clock()
        child = Child(
            spawned.pid,
            slot,
            spawned.identity,
            spawned.fd,
            started_at=now,
            last_heard=now,
            generation=generation,
            purpose=purpose,
            quiet_requested=quiet,
        )
        if replaces is not None:
            child.replaces = replaces.pid
            child.ready_deadline = now + self._settings.restart_ready_timeout_s
        self.add(child, current=replaces is None)
        log.info("child_started", purpose=purpose, replaces=child.replaces, **child.describe())
        return child

    def add(self, child: Child, *, current: bool) -> None:
        """Track a child (forked, or adopted after a re-exec) and listen to its pipe."""
        self._roster.add(child, current=current)
        self._selector.register(child.fd, selectors.EVENT_READ, child)

    def _close_in_child(self) -> None:
        """Runs in a new child: drop what belongs to the supervisor (the child's own read end is
        closed by spawn)."""
        self._signal_pipe.close()
        self._selector.close()
        for child in self._roster:
            if child.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(child.fd)
        try:
            self._hooks.in_child()
        except Exception:
            # A hook failing here must not turn into a crash loop of every child.
            log.exception("hook_failed", hook="in_child")

    # Pipes ----------------------------------------------------------------------------------
    def read(self, child: Child) -> list[Message | Garbage]:
        """Everything the child's pipe holds now; closes the pipe at end of file."""
        out: list[Message | Garbage] = []
        while child.fd >= 0:
            try:
                data = os.read(child.fd, READ_BYTES)
            except BlockingIOError:
                break
            except OSError:
                data = b""
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
        # others when they report ready. Children forked from now on start quiet (spawn's quiet=).
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

    @staticmethod
    def send(child: Child, signum: signal.Signals) -> None:
        # The pid can't have been reused: an unreaped child keeps it, even as a zombie.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
