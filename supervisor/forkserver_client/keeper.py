"""Keeping a fork server answering: the requests sent to the fork servers, and their answers.

The supervisor's loop never waits for a fork server: a fork server busy with a slow Redis must not
stop it from reaping, relaying signals and feeding systemd's watchdog. A spawn or a requeue is a
request sent on a non-blocking socket; its answer is handled when the loop sees it come in. The
keeper is the Spawner the swarm uses (children/spawner.py). It keeps:

- the fork server processes (`servers`, lifecycle.py: current, loading, retired);
- the spawns asked for and not answered yet (`requests`), and the requeues (`requeues`);
- the rules for one that stops answering. A fork server that owes an answer and has said nothing for
  COGWORKER_LIVENESS_TIMEOUT_S (plus COGWORKER_REDIS_TIMEOUT_S: a requeue may wait on Redis), or is
  not ready COGWORKER_BOOT_TIMEOUT_S after it started, is hung, and is SIGKILLed like a hung child.
  The spawns it owed fail (their slots are forked again from the next one), the requeues it owed go
  to the next one, and a new one is started at once. One that dies is started again, with a growing
  delay while it keeps dying.

A worker forked for a spawn given up on is stopped (children/late_spawns.py).
"""

from __future__ import annotations

import os
import secrets
import selectors
from collections.abc import Callable
from typing import Any

import structlog

from supervisor.children.child import Child
from supervisor.children.late_spawns import LateSpawns, UnclaimedPipe, pid_from
from supervisor.children.spawner import ExitStep, MakeSpawner, Spawner, SpawnerOwner, SpawnRequest
from supervisor.config import SwarmConfig
from supervisor.forkserver_client.handle import ForkServerHandle, Launch, launch
from supervisor.forkserver_client.lifecycle import ForkServers
from supervisor.restart_policy.requeue_requests import RequeueRequests

log = structlog.get_logger("cogworker.swarm")


def keeper_for(first: ForkServerHandle, settings: SwarmConfig) -> MakeSpawner:
    """How the swarm makes its spawner: a keeper of fork servers, starting with `first`."""

    def make(selector: selectors.BaseSelector, owner: SpawnerOwner, clock: Callable[[], float]) -> Spawner:
        return ForkServerKeeper(
            first,
            selector,
            owner,
            # A requeue may wait on Redis; beyond that, a fork server is held to a child's liveness.
            answer_timeout_s=settings.liveness_timeout_s + settings.redis_timeout_s,
            boot_timeout_s=settings.boot_timeout_s,
            clock=clock,
        )

    return make


class ForkServerKeeper:
    def __init__(
        self,
        first: ForkServerHandle,
        selector: selectors.BaseSelector,
        owner: SpawnerOwner,
        *,
        answer_timeout_s: float,
        boot_timeout_s: float,
        clock: Callable[[], float],
        launch: Launch = launch,
    ) -> None:
        self.servers = ForkServers(first, selector, clock=clock, launch=launch)
        self.requests: dict[str, SpawnRequest] = {}  # nonce -> request, oldest first
        self.requeues = RequeueRequests(clock, on_done=owner.jobs_requeued)
        self.stopping = False
        self._late = LateSpawns(selector)
        self._owner = owner
        self._answer_timeout_s = answer_timeout_s
        self._boot_timeout_s = boot_timeout_s
        self._clock = clock

    # What the swarm asks -------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """A fork server takes spawn requests now."""
        return self.servers.ready

    @property
    def restart_loading(self) -> bool:
        return self.servers.loading is not None

    @property
    def awaiting_spawns(self) -> bool:
        return bool(self.requests)

    @property
    def current_pid(self) -> int | None:
        current = self.servers.current
        return current.pid if current is not None else None

    def spawning(self, slot: int) -> SpawnRequest | None:
        return next((r for r in self.requests.values() if r.slot == slot), None)

    def next_due_in(self) -> float | None:
        return self.servers.next_due_in()

    # Requests ------------------------------------------------------------------------------
    def spawn(
        self, slot: int, purpose: str, *, quiet: bool, generation: int, replaces: Child | None = None
    ) -> SpawnRequest:
        """Ask the current fork server for a worker; the owner hears the answer. Raises OSError."""
        current = self.servers.current
        if current is None:
            raise OSError("no fork server is running")
        now = self._clock()
        nonce = secrets.token_hex(4)
        read_fd = current.request_spawn(slot, nonce, quiet=quiet, now=now)
        request = SpawnRequest(slot, purpose, nonce, quiet, generation, replaces, current, read_fd, now)
        self.requests[nonce] = request
        return request

    def requeue_jobs_of(self, identity: str) -> None:
        """A child died holding `identity`'s list: have it requeued (now, or by the next fork server)."""
        self.requeues.ask(identity, self._send_requeue)

    def send_requeues(self) -> None:
        """Send every requeue still waiting, without waiting for its retry delay (at exit)."""
        self.requeues.retry_due(self._send_requeue, force=True)

    def _send_requeue(self, identity: str) -> bool:
        current = self.servers.current
        return current is not None and current.request_requeue(identity, self._clock())

    # Answers -------------------------------------------------------------------------------
    def on_readable(self, source: object) -> None:
        if isinstance(source, UnclaimedPipe):
            self._late.read(source)
            return
        assert isinstance(source, ForkServerHandle), source
        for message in source.read(self._clock()):
            op = message.get("op")
            if op == "ready":
                self._on_ready(source)
            elif op == "requeued":
                self._on_requeued(source, message)
            elif op in ("spawned", "spawn_failed"):
                self._on_spawn_answer(source, message)
            else:
                log.warning("forkserver_said", forkserver_pid=source.pid, message=message)
        if source.gone:
            self.servers.unlisten(source)

    def _on_ready(self, server: ForkServerHandle) -> None:
        if server.retiring:
            return  # killed as hung a moment before: too late
        restarted = self.servers.took_over(server)
        # Requeues before anything is forked from it: a dead child's list goes back to its queue
        # before its slot is forked again, so a job is never run by two workers at once; the fork
        # server answers in order ("A child dies" in docs/architecture.md).
        self.send_requeues()
        self._owner.forkserver_ready(restarted=restarted)

    def _on_requeued(self, server: ForkServerHandle, answer: dict[str, Any]) -> None:
        identity = str(answer.get("identity", ""))
        if identity not in server.requeues:
            # From a fork server killed as hung: the request went to the next one, which answers it.
            log.info("requeue_answer_ignored", forkserver_pid=server.pid, child_identity=identity)
            return
        server.requeues.discard(identity)
        self.requeues.on_answer(answer)

    def _on_spawn_answer(self, server: ForkServerHandle, answer: dict[str, Any]) -> None:
        request = self._claim(server, answer.get("nonce"))
        pid = pid_from(answer.get("pid"))
        if request is None:
            if answer.get("op") == "spawned" and pid is not None:
                self._late.stop(pid, str(answer.get("nonce")), "a late answer")
            return
        if answer.get("op") == "spawned" and pid is not None:
            self._owner.spawned(request, pid)
        elif answer.get("op") == "spawned":  # forked, but which pid? Its first line will say.
            self._late.watch(request)
            self._owner.spawn_failed(request, f"an answer without a pid: {answer!r}", server_lost=False)
        else:
            os.close(request.read_fd)
            error = str(answer.get("error", "unknown error"))
            self._owner.spawn_failed(request, error, server_lost=False)

    def _claim(self, server: ForkServerHandle, nonce: object) -> SpawnRequest | None:
        """The request `server` answers, or None when nobody waits for that answer any more."""
        if nonce is None:  # a fork server from before answers named their nonce: they come in order
            nonce = next((n for n, r in self.requests.items() if r.server is server), None)
        request = self.requests.get(str(nonce))
        if request is None or request.server is not server:
            return None
        del self.requests[request.nonce]
        return request

    # Every loop turn -----------------------------------------------------------------------
    def tick(self) -> None:
        self.requeues.retry_due(self._send_requeue)
        self._kill_hung()
        self.servers.start_due(wanted=self._wanted())

    def _kill_hung(self) -> None:
        now = self._clock()
        for server in self.servers.alive():
            reason = server.overdue(
                now, answer_timeout_s=self._answer_timeout_s, boot_timeout_s=self._boot_timeout_s
            )
            if reason is not None:
                self._kill(server, reason)

    def _kill(self, server: ForkServerHandle, reason: str) -> None:
        log.error(
            "forkserver_hung",
            forkserver_pid=server.pid,
            generation=server.generation,
            reason=reason,
            note="killed; its spawns are asked of a new one, and its requeues sent to it",
        )
        server.kill()
        self._lose(server, f"the fork server hung ({reason})")
        if self.servers.killed(server):
            self._owner.restart_failed(f"the new fork server hung ({reason})")
        if self._wanted():
            self.servers.start_again(at_once=True)  # the hang took long enough to notice

    def _lose(self, server: ForkServerHandle, why: str) -> None:
        """It won't answer what it owes: requeues go to the next one, spawns fail."""
        self.requeues.lost(server.requeues)
        server.requeues.clear()
        for request in [r for r in self.requests.values() if r.server is server]:
            del self.requests[request.nonce]
            self._late.watch(request)
            self._owner.spawn_failed(request, why, server_lost=True)

    # Restarts, reaping and exit ----------------------------------------------------------
    def load_new_code(self) -> None:
        """A restart: start a fork server that imports the code on disk now. Raises OSError."""
        self.servers.load_new_code()

    def begin_stop(self) -> None:
        self.stopping = True

    def reaped(self, pid: int, code: int) -> bool:
        """The swarm reaped `pid`: True when it was one of ours."""
        server = self.servers.find(pid)
        if server is None:
            return False
        self.on_readable(server)  # its last answers are still in the socket
        self.servers.drop(server)
        if server.retiring:
            log.info("forkserver_retired", forkserver_pid=pid, exit_code=code, killed=server.killed)
            return True
        self._lose(server, f"the fork server exited {code}")
        if self.servers.exited(server):
            self._owner.restart_failed(
                f"the new fork server exited {code} before it was ready (see its error above)"
            )
        else:
            log.error(
                "forkserver_exited",
                forkserver_pid=pid,
                exit_code=code,
                note="running children go on; no child can be forked until a new fork server is ready",
            )
        if self._wanted():
            self.servers.start_again(at_once=False)
        return True

    def _wanted(self) -> bool:
        """Whether a new fork server is needed: while the swarm runs, and while it stops with dead
        children's jobs still to requeue (else they wait for heartbeat orphan recovery, minutes)."""
        return not self.stopping or bool(self.requeues.pending)

    def requeues_settled(self) -> bool:
        """At exit: every requeue was answered, or none can be (no fork server is on its way)."""
        if self.requeues.in_flight:
            return False
        if not self.requeues.pending or self.ready:
            return True  # (pending with a ready fork server: Redis refused them; no more tries now)
        return not self.servers.coming()

    def exit_steps(self) -> list[ExitStep]:
        """Requeues first (the new fork server the keeper starts for them too), then every fork
        server is told to exit, then killed if it did not."""

        def no_servers() -> bool:
            return not self.servers.alive()

        return [
            (self.send_requeues, self.requeues_settled),
            (self.servers.retire_all, no_servers),
            (self.servers.kill_all, no_servers),
        ]

    def close(self) -> set[str]:
        """At exit: let go of every pipe still held; returns the requeues never done."""
        for request in self.requests.values():
            os.close(request.read_fd)
        self.requests.clear()
        self._late.close_all()
        return set(self.requeues.pending)
