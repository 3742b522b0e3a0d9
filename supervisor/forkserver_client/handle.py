"""The supervisor's handle on one fork server process: start it, send it requests, read its answers.

The fork server (supervisor/forkserver/) is a process the supervisor starts with
`python -m supervisor.forkserver.main` (the first one of a swarm is a fork of the supervisor instead:
first_forkserver.py). It has the settings validated (forkserver/settings_check.py), imports the
worker code (and the app, with COGWORKER_PRELOAD), then waits for requests on a socket pair (the
messages are in wire/forkserver_messages.py). The supervisor never waits for an answer: its socket is
non-blocking, and answers are read by its loop when they come. This handle counts what the fork
server owes, so a fork server that stops answering can be told from a busy one (keeper.py replaces
it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any

from supervisor import signals
from supervisor.children.env import scrub_child_env
from supervisor.forkserver_client.first_forkserver import fork_first_forkserver
from supervisor.wire.forkserver_messages import (
    ANSWERS,
    CONTROL_FD_VARIABLE,
    SUPERVISOR_PID_VARIABLE,
    receive,
    send,
)

FORKSERVER_MODULE = "supervisor.forkserver.main"  # run with `python -m`


class ForkServerHandle:
    """One fork server process. A restart starts a new one; the old one exits when told to retire."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.pid = 0
        self.sock: socket.socket | None = None
        self.started_at = 0.0
        self.loaded = False  # it said `ready` once: the code is imported
        self.ready = False  # loaded, and taking requests
        self.retiring = False  # told to exit (or killed): it takes no more requests
        self.killed = False  # SIGKILLed (hung, or not exiting at the end): nothing it says counts
        self.gone = False  # its end of the socket is closed: it has exited, or is about to
        self.settings: dict[str, Any] = {}
        self.owed = 0  # requests sent and not answered yet
        self.owed_since = 0.0  # when it last answered (or was asked, owing nothing before)
        self.requeues: set[str] = set()  # identities whose requeue it owes

    # Start and stop ---------------------------------------------------------------------------
    def start(self, now: float, *, fork_closing: Iterable[int] | None = None) -> None:
        """Start the process: a new interpreter, or with `fork_closing` (the supervisor's own file
        descriptors, which the child closes) a fork of this one (first_forkserver.py says when). Raises
        OSError."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if fork_closing is not None:
                self.pid = fork_first_forkserver(theirs, [ours.fileno(), *fork_closing])
            else:
                self.pid = self._spawn(theirs)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.attach(ours, now)

    @staticmethod
    def _spawn(theirs: socket.socket) -> int:
        env = dict(os.environ)
        scrub_child_env(env)  # only the supervisor speaks to systemd
        env[CONTROL_FD_VARIABLE] = str(theirs.fileno())
        env[SUPERVISOR_PID_VARIABLE] = str(os.getpid())
        os.set_inheritable(theirs.fileno(), True)
        sys.stdout.flush()
        sys.stderr.flush()
        # The handled signals arrive blocked and with default actions: the fork server leaves
        # signals to the supervisor, and its workers unblock them once their own handlers are in.
        return os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", FORKSERVER_MODULE],
            env,
            setsigmask=signals.HANDLED,
            setsigdef=signals.HANDLED,
        )

    def attach(self, sock: socket.socket, now: float) -> None:
        """Talk to it over `sock` (start() does this; tests attach a socket they answer themselves)."""
        sock.setblocking(False)  # a full socket buffer must never block the supervisor's loop
        self.sock = sock
        self.started_at = now

    def retire(self) -> None:
        """No more requests: it exits once it has answered the ones already sent."""
        self.retiring = True
        self.ready = False
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def kill(self) -> None:
        self.killed = self.retiring = True
        self.ready = False
        if self.pid > 0:  # never os.kill(0, ...): that is our whole process group
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        self.ready = False
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    # Requests ---------------------------------------------------------------------------------
    def request_spawn(self, slot: int, nonce: str, *, quiet: bool, now: float) -> int:
        """Ask for a worker for `slot`; returns the read end of its state pipe (non-blocking). The
        answer comes later. Raises OSError when the request can't be sent."""
        if not self.ready or self.sock is None:
            raise OSError("no fork server is ready")
        read_fd, write_fd = os.pipe()
        try:
            send(self.sock, {"op": "spawn", "slot": slot, "nonce": nonce, "quiet": quiet}, [write_fd])
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the worker holds the only write end: its exit is our end of file
        os.set_blocking(read_fd, False)
        self._asked(now)
        return read_fd

    def request_requeue(self, identity: str, now: float) -> bool:
        if not self.ready or self.sock is None:
            return False
        try:
            send(self.sock, {"op": "requeue", "identity": identity})
        except OSError:  # BlockingIOError too: a full buffer means it isn't reading
            return False
        self._asked(now)
        self.requeues.add(identity)
        return True

    def _asked(self, now: float) -> None:
        if self.owed == 0:
            self.owed_since = now
        self.owed += 1

    def overdue(self, now: float, *, answer_timeout_s: float, boot_timeout_s: float) -> str | None:
        """Why it counts as hung now, or None: not ready within the boot timeout, or owing an answer
        and silent for longer than the answer timeout."""
        if self.pid <= 0 or self.gone or self.killed:
            return None
        if not self.loaded and now - self.started_at > boot_timeout_s:
            return f"not ready within {boot_timeout_s:g} s"
        if self.owed and now - self.owed_since > answer_timeout_s:
            return f"owes {self.owed} answers and was silent for {now - self.owed_since:.1f} s"
        return None

    # Answers ----------------------------------------------------------------------------------
    def read(self, now: float) -> list[dict[str, Any]]:
        """Every message waiting now. At end of stream, `gone` turns true; the caller unregisters the
        socket, then closes it."""
        out: list[dict[str, Any]] = []
        while self.sock is not None and not self.gone:
            try:
                message = self._receive()
            except BlockingIOError:
                break
            if message is None:
                break
            op = message.get("op")
            if op == "ready":
                self.loaded = True
                self.ready = not self.retiring
                self.settings = dict(message.get("settings") or {})
            elif op in ANSWERS and self.owed:
                self.owed -= 1
                self.owed_since = now
            out.append(message)
        return out

    def _receive(self) -> dict[str, Any] | None:
        """One message; None at end of stream (or an unreadable one), which marks it gone. Raises
        BlockingIOError when nothing is waiting."""
        assert self.sock is not None
        try:
            message, fds = receive(self.sock)
        except BlockingIOError:
            raise
        except (OSError, ValueError):
            message, fds = None, []
        for fd in fds:
            os.close(fd)  # nothing is sent this way; never leak one
        if message is None:
            self.gone = True
            self.ready = False
        return message


# (generation, now) -> a started fork server; raises OSError. Tests pass their own to the keeper.
Launch = Callable[[int, float], ForkServerHandle]


def launch(generation: int, now: float) -> ForkServerHandle:
    """Start a fork server process. Raises OSError."""
    server = ForkServerHandle(generation)
    server.start(now)
    return server
