"""Keeping every slot filled: asking the spawner for a child, tracking it when it comes, and, when a
slot's child is gone for good, scheduling the next one (backoff.py says when).

Replacements of running children (restarts, memory) are children/replacements.py's; they ask for their
children through `fork` here too, so every spawn goes one way and counts the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import structlog

from supervisor.children.child import Child, ExitOutcome
from supervisor.children.processes import ChildProcesses
from supervisor.children.roster import Roster
from supervisor.children.spawner import Spawner, SpawnRequest
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks
from supervisor.restart_policy.backoff import RespawnBackoff

log = structlog.get_logger("cogworker.swarm")


class Respawns:
    def __init__(
        self,
        roster: Roster,
        procs: ChildProcesses,
        backoff: RespawnBackoff,
        spawner: Spawner,
        hooks: SwarmHooks,
        *,
        quiet_slots: set[int],
        generation: Callable[[], int],
    ) -> None:
        self._roster = roster
        self._procs = procs
        self._backoff = backoff
        self._spawner = spawner
        self._hooks = hooks
        self._quiet_slots = quiet_slots  # the swarm's set: children forked for these start quiet
        self._generation = generation
        self.stopping = False  # nothing is respawned, and whatever still comes is stopped
        self.replaced = Counter[str]()  # why slots got new children: crash, hung, memory, restart…
        self._reasons: dict[int, str] = {}  # slot -> why its respawn was scheduled

    def fork(self, slot: int, purpose: str, *, replaces: Child | None = None) -> bool:
        """Ask for a child for `slot`; it is tracked when the spawner answers (`spawned`)."""
        try:
            self._spawner.spawn(
                slot,
                purpose,
                quiet=slot in self._quiet_slots,
                generation=self._generation(),
                replaces=replaces,
            )
        except OSError as exc:
            retry = self._backoff.fork_failed(slot) if replaces is None else None
            log.error("fork_failed", slot=slot, purpose=purpose, error=str(exc), retry_in_s=retry)
            return False
        return True

    def schedule(self, child: Child, outcome: ExitOutcome) -> None:
        """`child` was its slot's current child, and nothing else takes the slot: respawn it."""
        self._reasons[child.slot] = outcome.reason
        if child.respawn_on_exit:
            self._backoff.schedule_now(child.slot)  # a restart in place is no crash
            return
        crash = self._backoff.crashed(child.slot)
        log.warning(
            "respawn_scheduled",
            slot=child.slot,
            delay_s=crash.delay_s,
            streak=crash.streak,
            after=outcome.reason,
        )

    def respawn_due(self) -> None:
        if self.stopping or not self._spawner.ready:
            return  # due slots stay due until a fork server is ready
        for slot in self._backoff.due():
            if self._roster.current(slot) is None and self._spawner.spawning(slot) is None:
                self.fork(slot, "respawn")

    def count_replaced(self, slot: int, reason: str) -> None:
        self.replaced[reason] += 1
        hook_calls.call(self._hooks.child_replaced, slot, reason)

    # The spawner's answers -------------------------------------------------------------------
    def spawned(self, request: SpawnRequest, pid: int) -> None:
        old = request.replaces
        if old is not None and not self._roster.is_current(old):
            old = None  # it exited while its replacement was being forked: that takes the slot
        surplus = old is None and self._roster.current(request.slot) is not None
        takes_slot = old is None and not surplus
        child = self._procs.adopt(request, pid, replaces=old, current=takes_slot)
        if takes_slot:
            self._backoff.started(request.slot, at=child.started_at)
            if request.purpose == "respawn":
                self.count_replaced(request.slot, self._reasons.pop(request.slot, "respawn"))
        hook_calls.call(self._hooks.child_started, child)
        if self.stopping or surplus:
            self._procs.terminate(child)

    def spawn_failed(self, request: SpawnRequest, error: str, *, server_lost: bool) -> None:
        slot, purpose = request.slot, request.purpose
        if self.stopping or self._roster.current(slot) is not None or self._spawner.spawning(slot):
            log.error("fork_failed", slot=slot, purpose=purpose, error=error)
            return
        # A lost fork server is no crash of the slot: it is forked as soon as a new one is ready.
        retry = None if server_lost else self._backoff.fork_failed(slot)
        if server_lost:
            self._backoff.schedule_now(slot)
        log.error("fork_failed", slot=slot, purpose=purpose, error=error, retry_in_s=retry)
