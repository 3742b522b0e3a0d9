"""The fork server's request loop: answer each of the supervisor's requests, one at a time, in order.

A `spawn` forks a worker (fork.py) and answers with its pid; a `requeue` puts a dead child's jobs back
on their queues (redis_requeue.py) and answers with what moved. The loop ends when the supervisor
closes its side of the socket. The messages are described in supervisor/wire/forkserver_messages.py.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import structlog

from cogworker import exitcodes
from cogworker.settings_fields import SettingsFields
from supervisor.forkserver.fork import WorkerOrder, fork_worker
from supervisor.forkserver.redis_requeue import RedisRequeue
from supervisor.wire.forkserver_messages import receive, send

log = structlog.get_logger("cogworker.forkserver")


class ForkServer:
    def __init__(
        self, settings: SettingsFields, sock: socket.socket, supervisor_pid: int, app_loaded: bool
    ) -> None:
        self.settings = settings
        self.sock = sock
        self.supervisor_pid = supervisor_pid
        self.app_loaded = app_loaded
        self.requeue = RedisRequeue(settings)

    def serve(self) -> int:
        while True:
            try:
                message, fds = receive(self.sock)
            except (OSError, ValueError) as exc:
                log.error("forkserver_bad_request", error=str(exc))
                return exitcodes.FAILURE
            if message is None:
                return exitcodes.OK  # the supervisor is done with us
            for fd in fds:
                # Descriptors passed over a socket arrive inheritable: a program a job execs (with
                # os.system, or close_fds=False) would get the child's state pipe, to write to the
                # supervisor as if it were the child, and to hold open after the child is gone.
                os.set_inheritable(fd, False)
            try:
                answer = self.handle(message, fds)
            finally:
                for fd in fds:
                    os.close(fd)
            send(self.sock, answer)

    def handle(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        op = message.get("op")
        if op == "spawn" and len(fds) == 1:
            slot, nonce = int(message["slot"]), str(message["nonce"])
            order = WorkerOrder(
                self.settings,
                slot,
                nonce,
                fds[0],
                self.supervisor_pid,
                self.app_loaded,
                bool(message.get("quiet")),
            )
            try:
                pid = fork_worker(order, close_in_child=self.sock.close)
            except OSError as exc:
                return {"op": "spawn_failed", "slot": slot, "nonce": nonce, "error": str(exc)}
            return {"op": "spawned", "slot": slot, "nonce": nonce, "pid": pid}
        if op == "requeue":
            identity = str(message.get("identity"))
            try:
                result = self.requeue.requeue_dead_child(identity)
            except Exception as exc:  # Redis unreachable or refusing: the supervisor retries later
                return {"op": "requeued", "identity": identity, "ok": False, "error": str(exc)}
            return {
                "op": "requeued",
                "identity": identity,
                "ok": True,
                "moved": result.moved,
                "dead": len(result.buried),
                "kept": result.failed,
            }
        return {"op": "error", "error": f"unknown request {op!r}"}
