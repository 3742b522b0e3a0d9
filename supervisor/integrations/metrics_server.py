"""The HTTP server behind /metrics: bounded in threads, connections and time per request.

prometheus_client's own server starts a thread per connection and never times a client out: 300
idle sockets gave the supervisor 302 threads, each parked forever (issue 13, E3). Here one thread
reads every connection's request with `selectors` (an idle or trickling connection costs a file
descriptor, not a thread), and a fixed pool of handler threads answers complete requests:

- a connection has `request_timeout_s` to send its whole request (slowloris included) and again to
  take the whole response; then it is closed;
- at most `max_connections` connections wait for their request; when one more arrives, the one that
  has waited longest is closed, so a flood of idle sockets can't lock a scraper out;
- a request is one GET of at most MAX_REQUEST_BYTES, answered once with `Connection: close`.

The response itself comes from prometheus_client's WSGI app (content negotiation, gzip, `name[]`).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import structlog

log = structlog.get_logger("cogworker.metrics")

MAX_CONNECTIONS = 32
HANDLER_THREADS = 2
REQUEST_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 8192
# A WSGI application: environ, start_response -> body chunks.
App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(slots=True)
class _Pending:
    """A connection whose request is still arriving."""

    sock: socket.socket
    deadline: float
    data: bytearray = field(default_factory=bytearray)


class BadRequest(Exception):
    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class MetricsServer:
    """Serves one WSGI app from a reader thread and HANDLER_THREADS handler threads."""

    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        *,
        max_connections: int = MAX_CONNECTIONS,
        handler_threads: int = HANDLER_THREADS,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._app = app
        self.max_connections = max_connections
        self._handler_count = handler_threads
        self.request_timeout_s = request_timeout_s
        self.accepted = 0  # connections taken off the listen backlog (tests wait on it)
        self._listener = _listen(host, port)
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        # Requests read in full, waiting for a handler; bounded, so a stuck handler can't pile them up.
        self._ready: queue.Queue[tuple[socket.socket, bytes, float] | None] = queue.Queue(max_connections)
        self._pending: dict[int, _Pending] = {}  # fd -> connection, in order of arrival
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._read_loop, name="metrics-reader", daemon=True)]
        self._threads += [
            threading.Thread(target=self._handle_loop, name=f"metrics-handler-{n}", daemon=True)
            for n in range(self._handler_count)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop serving and close every socket; the port is free once this returns."""
        self._stopping = True
        os.write(self._wake_w, b"x")
        for _ in range(self._handler_count):
            # Past a full queue the handler still sees `_stopping` after its current request.
            with contextlib.suppress(queue.Full):
                self._ready.put_nowait(None)
        # The reader closes the connections still waiting for their request as it exits.
        for thread in self._threads:
            thread.join(timeout_s)
        self._listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # Reader thread ------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ, "accept")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            while not self._stopping:
                try:
                    self._read_once(selector)
                except Exception:
                    # A bug here must not end the metrics endpoint for the swarm's lifetime.
                    log.exception("metrics_server_failed")
            for fd in list(self._pending):
                self._drop(selector, fd)

    def _read_once(self, selector: selectors.BaseSelector) -> None:
        for key, _ in selector.select(self._next_timeout()):
            if key.data == "accept":
                self._accept(selector)
            elif key.data == "read" and key.fd in self._pending:
                self._receive(selector, key.fd)
        self._expire(selector)

    def _next_timeout(self) -> float | None:
        if not self._pending:
            return None
        first = next(iter(self._pending.values()))  # arrival order: the first has the nearest deadline
        return max(0.0, first.deadline - time.monotonic())

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(self.max_connections):
            try:
                sock, _ = self._listener.accept()
            except OSError:  # the backlog is empty, or no descriptor is free: the next event retries
                return
            self._admit(selector, sock)

    def _admit(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        self.accepted += 1
        sock.setblocking(False)
        if len(self._pending) >= self.max_connections:
            self._drop(selector, next(iter(self._pending)))
        self._pending[sock.fileno()] = _Pending(sock, time.monotonic() + self.request_timeout_s)
        selector.register(sock, selectors.EVENT_READ, "read")

    def _receive(self, selector: selectors.BaseSelector, fd: int) -> None:
        pending = self._pending[fd]
        try:
            chunk = pending.sock.recv(MAX_REQUEST_BYTES + 1)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client closed its end, or reset
            self._drop(selector, fd)
            return
        pending.data += chunk
        if b"\r\n\r\n" not in pending.data and b"\n\n" not in pending.data:
            if len(pending.data) > MAX_REQUEST_BYTES:
                self._hand_over(selector, fd, b"")  # answered 431 by a handler
            return
        self._hand_over(selector, fd, bytes(pending.data))

    def _hand_over(self, selector: selectors.BaseSelector, fd: int, request: bytes) -> None:
        pending = self._pending.pop(fd)
        selector.unregister(pending.sock)
        try:
            self._ready.put_nowait((pending.sock, request, time.monotonic() + self.request_timeout_s))
        except queue.Full:  # every handler is stuck and the queue is full: no answer is better than a wait
            pending.sock.close()

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for fd, pending in list(self._pending.items()):
            if pending.deadline > now:
                break
            self._drop(selector, fd)

    def _drop(self, selector: selectors.BaseSelector, fd: int) -> None:
        pending = self._pending.pop(fd)
        selector.unregister(pending.sock)
        pending.sock.close()

    # Handler threads ----------------------------------------------------------------------------
    def _handle_loop(self) -> None:
        while not self._stopping:
            item = self._ready.get()
            if item is None:
                return
            sock, request, deadline = item
            try:
                _send_all(sock, self._respond(request), deadline)
                _discard_unread(sock)
            except OSError:
                pass  # the client went away or stopped reading: nothing to tell it
            except Exception:
                log.exception("metrics_request_failed")
            finally:
                sock.close()

    def _respond(self, request: bytes) -> bytes:
        try:
            environ = _environ(request)
        except BadRequest as bad:
            return _response(bad.status, [("Content-Type", "text/plain")], bad.status.encode() + b"\n")
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer.update(status=status, headers=headers)

        body = b"".join(self._app(environ, start_response))
        return _response(answer["status"], answer["headers"], body)


def _listen(host: str, port: int) -> socket.socket:
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restarted supervisor can bind while the old one's connections are in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _environ(request: bytes) -> dict[str, Any]:
    """The WSGI environ of one request (headers only: a GET has no body), or BadRequest."""
    if not request:
        raise BadRequest("431 Request Header Fields Too Large")
    head = request.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    try:
        lines = head.decode("latin-1").split("\n")
        method, target, version = lines[0].split(" ")
    except ValueError as exc:
        raise BadRequest("400 Bad Request") from exc
    if not version.startswith("HTTP/"):
        raise BadRequest("400 Bad Request")
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(path),
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": version,
        "wsgi.input": io.BytesIO(),
    }
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadRequest("400 Bad Request")
        environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
    return environ


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    """Send `data` by `deadline`, however slowly the client reads (a per-call timeout would let a
    client that takes a byte every few seconds hold a handler for ever)."""
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the client did not take the response in time")
        sock.settimeout(remaining)
        view = view[sock.send(view) :]


def _discard_unread(sock: socket.socket, limit: int = 1 << 20) -> None:
    """Read and drop what the client sent beyond the request (an oversized one, a POST body) and has
    already arrived. Closing a socket with unread data sends a reset, which can destroy the response
    before the client has read it."""
    sock.setblocking(False)
    discarded = 0
    with contextlib.suppress(OSError):
        while discarded < limit and (chunk := sock.recv(65536)):
            discarded += len(chunk)
