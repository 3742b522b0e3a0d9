"""The fork server ("template"): the process the swarm's workers are forked from.

It loads and validates the settings (a bad one exits 78, before anything is forked), imports the
worker code and, with COGWORKER_PRELOAD, the app, freezes all of it out of the collector's reach, and
then forks workers on the supervisor's request (spawn.py), so they share those pages with it. It also
requeues the jobs of children that died (rescue.py): the supervisor itself holds no Redis client.

Run by the supervisor as `python -m supervisor.template`, never by hand. It leaves signals to the
supervisor (they arrive blocked), dies with it (PR_SET_PDEATHSIG), and exits when the supervisor
closes its side of the control socket.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes, logs
from cogworker.settings import Settings, load_or_exit
from cogworker.worker import BootError, import_app
from supervisor import forkserver
from supervisor.rescue import Rescue
from supervisor.spawn import WorkerOrder, die_with_parent, spawn

log = structlog.get_logger("cogworker.forkserver")


def main() -> int:
    try:
        sock = socket.socket(fileno=int(os.environ.pop(forkserver.CONTROL_FD_VARIABLE)))
        supervisor_pid = int(os.environ.pop(forkserver.SUPERVISOR_PID_VARIABLE))
    except (KeyError, ValueError, OSError) as exc:
        print(f"cogworker fork server: run by cogworker-swarm only ({exc})", file=sys.stderr)
        return exitcodes.USAGE
    die_with_parent()
    if os.getppid() != supervisor_pid:
        return exitcodes.FAILURE  # the supervisor died before PDEATHSIG was armed
    settings = load_or_exit()  # exits 78 on a bad setting; the supervisor exits with the same code
    logs.configure(settings.log_level, settings.log_format, role="forkserver")
    setproctitle(forkserver.TITLE)
    app_loaded = False
    if settings.preload:
        try:
            import_app(settings.require_modules)
        except BootError as exc:
            log.error("boot_failed", error=str(exc))
            print(f"cogworker-swarm: {exc}", file=sys.stderr)
            return exitcodes.BOOT_ERROR
        app_loaded = True
    # Keep what is imported by now (the app too, when preloaded) out of the collector's reach: a
    # collection in a child touching those objects would copy every page they live on (copy-on-write).
    gc.collect()
    gc.freeze()
    server = Template(settings, sock, supervisor_pid, app_loaded)
    forkserver.send(sock, {"op": "ready", "settings": settings.model_dump(mode="json")})
    log.info("forkserver_ready", preload=app_loaded)
    return server.serve()


class Template:
    def __init__(
        self, settings: Settings, sock: socket.socket, supervisor_pid: int, app_loaded: bool
    ) -> None:
        self.settings = settings
        self.sock = sock
        self.supervisor_pid = supervisor_pid
        self.app_loaded = app_loaded
        self.rescue = Rescue(settings)

    def serve(self) -> int:
        while True:
            try:
                message, fds = forkserver.receive(self.sock)
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
            forkserver.send(self.sock, answer)

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
                pid = spawn(order, close_in_child=self.sock.close)
            except OSError as exc:
                return {"op": "spawn_failed", "slot": slot, "nonce": nonce, "error": str(exc)}
            return {"op": "spawned", "slot": slot, "nonce": nonce, "pid": pid}
        if op == "requeue":
            identity = str(message.get("identity"))
            try:
                result = self.rescue.requeue(identity)
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


if __name__ == "__main__":
    sys.exit(main())
