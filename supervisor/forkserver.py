"""The supervisor's handle on its fork server, and the messages the two exchange.

The fork server (template.py) is a process the supervisor starts with `python -m supervisor.template`.
It validates the settings, imports the worker code (and the app, with COGWORKER_PRELOAD), then waits
for requests on a Unix SOCK_SEQPACKET socket pair: one datagram per message, JSON, with a file
descriptor riding along where one is needed.

    supervisor -> fork server   {"op": "spawn", "slot", "nonce", "quiet"} + the state pipe's write end
                                {"op": "requeue", "identity"}
    fork server -> supervisor   {"op": "ready", "settings"}
                                {"op": "spawned", "slot", "pid"} or {"op": "spawn_failed", "error"}
                                {"op": "requeued", "identity", "ok", "moved", "dead", "kept", "error"}

Requests are answered in order. A spawn waits for its answer (a fork takes a millisecond or two);
requeue answers are read by the supervisor's loop. Closing the supervisor's sending side tells the
fork server to exit once it has answered everything already sent.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson

from supervisor import signals
from supervisor.notify import scrub_child_env

TITLE = "cogworker-swarm fork server"  # its process title, as `ps` shows it
CONTROL_FD_VARIABLE = "COGWORKER_FORKSERVER_FD"
SUPERVISOR_PID_VARIABLE = "COGWORKER_SUPERVISOR_PID"
MAX_MESSAGE = 1 << 20
SPAWN_TIMEOUT_S = 10.0


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = orjson.dumps(message)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at end of stream."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 1)
    if not data:
        return None, fds
    message = orjson.loads(data)
    if not isinstance(message, dict):
        raise ValueError(f"fork server message is not an object: {data[:80]!r}")
    return message, fds


@dataclass(frozen=True, slots=True)
class Spawned:
    pid: int
    fd: int  # read end of the child's state pipe, non-blocking


class ForkServer:
    """One fork server process. A restart starts a new one; the old one exits when told to retire."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.pid = 0
        self.sock: socket.socket | None = None
        self.ready = False
        self.retiring = False
        self.gone = False  # its end of the socket is closed: it has exited, or is about to
        self.settings: dict[str, Any] = {}
        self._backlog: list[dict[str, Any]] = []  # answers read while a spawn waited for its own

    # Start and stop ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process. Raises OSError."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = dict(os.environ)
            scrub_child_env(env)  # only the supervisor speaks to systemd
            env[CONTROL_FD_VARIABLE] = str(theirs.fileno())
            env[SUPERVISOR_PID_VARIABLE] = str(os.getpid())
            os.set_inheritable(theirs.fileno(), True)
            sys.stdout.flush()
            sys.stderr.flush()
            # The handled signals arrive blocked and with default actions: the fork server leaves
            # signals to the supervisor, and its workers unblock them once their own handlers are in.
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-m", "supervisor.template"],
                env,
                setsigmask=signals.HANDLED,
                setsigdef=signals.HANDLED,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours

    def retire(self) -> None:
        """No more requests: it exits once it has answered the ones already sent."""
        self.retiring = True
        self.ready = False
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.ready = False
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    # Messages ---------------------------------------------------------------------------------
    @property
    def has_backlog(self) -> bool:
        return bool(self._backlog)

    def read(self) -> list[dict[str, Any]]:
        """Every message waiting now (backlog first). At end of stream, `gone` turns true; the caller
        unregisters the socket, then closes it."""
        out, self._backlog = self._backlog, []
        while self.sock is not None and not self.gone:
            try:
                message = self._receive()
            except BlockingIOError:
                break
            if message is None:
                break
            if message.get("op") == "ready":
                self.ready = not self.retiring
                self.settings = dict(message.get("settings") or {})
            out.append(message)
        return out

    def requeue(self, identity: str) -> bool:
        if not self.ready or self.sock is None:
            return False
        try:
            send(self.sock, {"op": "requeue", "identity": identity})
        except OSError:
            return False
        return True

    def spawn(self, slot: int, nonce: str, *, quiet: bool) -> Spawned:
        """Have the fork server fork a worker for `slot`. Raises OSError when it can't."""
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
        try:
            answer = self._await_spawn_answer()
        except OSError:
            os.close(read_fd)
            raise
        if answer.get("op") != "spawned":
            os.close(read_fd)
            raise OSError(f"fork server could not fork: {answer.get('error', answer)}")
        os.set_blocking(read_fd, False)
        return Spawned(int(answer["pid"]), read_fd)

    def _await_spawn_answer(self) -> dict[str, Any]:
        assert self.sock is not None
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise OSError(f"fork server gave no answer within {SPAWN_TIMEOUT_S:g} s")
                try:
                    message = self._receive()
                except BlockingIOError:
                    continue
                if message is None:
                    raise OSError("fork server went away")
                if message.get("op") in ("spawned", "spawn_failed"):
                    return message
                self._backlog.append(message)

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

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
