"""Workers nobody waits for: forked for a spawn the supervisor gave up on, and stopped.

A worker can still be forked for a spawn given up on (its fork server was slow, not dead, or died
between the fork and its answer). Nobody tracks that worker, so it is stopped: by the pid in the
late answer, or by the pid its first line gives on its state pipe, which is kept open for that.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
from dataclasses import dataclass, field

import structlog

from supervisor.children.processes import pipe_chunks
from supervisor.children.spawner import SpawnRequest
from supervisor.wire.child_lines import LineBuffer, Message

log = structlog.get_logger("cogworker.swarm")


@dataclass(eq=False)
class UnclaimedPipe:
    """The state pipe of a spawn given up on: a worker forked for it anyway says its pid here."""

    fd: int
    nonce: str
    lines: LineBuffer = field(default_factory=LineBuffer)
    stopped: bool = False


class LateSpawns:
    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._selector = selector
        self._pipes: dict[str, UnclaimedPipe] = {}  # nonce -> pipe

    def watch(self, request: SpawnRequest) -> None:
        """Given up on: keep its state pipe open for a worker's first line."""
        pipe = UnclaimedPipe(request.read_fd, request.nonce)
        self._pipes[request.nonce] = pipe
        self._selector.register(pipe.fd, selectors.EVENT_READ, pipe)

    def read(self, pipe: UnclaimedPipe) -> None:
        # Read until the end of file (the worker, if there is one, has exited): a pipe left full
        # would block the worker's next line, and it must get as far as its stop. At most
        # MAX_READ_PER_TURN per loop turn, as for any child.
        for data in pipe_chunks(pipe.fd):
            if not data:
                self._close(pipe)
                return
            for item in pipe.lines.feed(data):
                if isinstance(item, Message) and (pid := pid_from(item.fields.get("pid"))) is not None:
                    self.stop(pid, pipe.nonce, "its first line")

    def stop(self, pid: int, nonce: str, source: str) -> None:
        pipe = self._pipes.get(nonce)
        if pipe is not None and pipe.stopped:
            return
        log.warning(
            "late_spawn_stopped",
            child_pid=pid,
            nonce=nonce,
            learned_from=source,
            note="forked for a spawn given up on; nobody tracks it, so it is stopped",
        )
        # It is our child (we are its subreaper): its pid stays its own until we reap it, and a pid
        # freed by a reap this very turn is not handed out again in the milliseconds since.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if pipe is not None:
            pipe.stopped = True

    def close_all(self) -> None:
        for pipe in list(self._pipes.values()):
            self._close(pipe)

    def _close(self, pipe: UnclaimedPipe) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pipe.fd)
        os.close(pipe.fd)
        self._pipes.pop(pipe.nonce, None)


def pid_from(value: object) -> int | None:
    """A pid from a message, or None when it isn't one (never 0 or less: os.kill would signal a group)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        pid = int(value)
    except ValueError:
        return None
    return pid if pid > 0 else None
