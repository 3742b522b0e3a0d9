"""The messages between the supervisor and its fork server, and how the fork server finds its socket.

The supervisor starts the fork server with one end of a Unix SOCK_SEQPACKET socket pair, whose
descriptor number it passes in CONTROL_FD_VARIABLE: one datagram per message, JSON, with a file
descriptor riding along where one is needed.

    supervisor -> fork server   {"op": "spawn", "slot", "nonce", "quiet"} + the state pipe's write end
                                {"op": "requeue", "identity"}
    fork server -> supervisor   {"op": "ready", "settings"}
                                {"op": "spawned", "slot", "nonce", "pid"}
                                {"op": "spawn_failed", "slot", "nonce", "error"}
                                {"op": "requeued", "identity", "ok", "moved", "dead", "kept", "error"}

Requests are answered one each, in order. Closing the supervisor's sending side tells the fork server
to exit once it has answered everything already sent. A restart starts a fork server with the code on
disk now, which may be newer than the supervisor's: change these messages only in ways both sides read.
"""

from __future__ import annotations

import socket
from typing import Any

CONTROL_FD_VARIABLE = "COGWORKER_FORKSERVER_FD"
SUPERVISOR_PID_VARIABLE = "COGWORKER_SUPERVISOR_PID"
MAX_MESSAGE = 1 << 20
ANSWERS = frozenset({"spawned", "spawn_failed", "requeued", "error"})  # one per request


# orjson is imported where it is used: the supervisor imports this module before it starts its fork
# server, and orjson's own imports (dataclasses, uuid, datetime: ~13 ms) would delay that start.


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    import orjson

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
    import orjson

    message = orjson.loads(data)
    if not isinstance(message, dict):
        raise ValueError(f"fork server message is not an object: {data[:80]!r}")
    return message, fds
