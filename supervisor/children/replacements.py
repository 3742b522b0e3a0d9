"""Replacing children that are still running: restarts (HUP/USR2), memory restarts, and children with
a job stuck past its time limit (cogworker/worker/running/stuck_jobs.py: the job is filed by the child, which
reports `stuck`; its other jobs finish, or are requeued, as on any stop).

A replacement is forked next to the child it replaces and only becomes its slot's current child when
it reports ready; then the old child is retired (asked to stop, to drain its jobs). A replacement that
can't be forked, exits, or is not ready within `restart_ready_timeout_s`, is given up on: the old
child keeps serving and a restart in progress ends as failed, so a broken deploy never takes capacity
down with it. Forking is asked of the fork server and answered later, so a slot with a spawn in
flight (`spawning`) is left alone until the answer comes.
restart_policy/restart_plan.py holds the plan a restart follows; this module carries it out.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from supervisor.children.child import Child, Phase
from supervisor.children.processes import ChildProcesses
from supervisor.children.roster import Roster
from supervisor.config import SwarmConfig
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks
from supervisor.restart_policy.backoff import RespawnBackoff
from supervisor.restart_policy.restart_plan import RestartPlan

log = structlog.get_logger("cogworker.swarm")

# (slot, purpose, the child replaced) -> whether the fork server was asked for the replacement
Fork = Callable[[int, str, Child], bool]


class Replacements:
    def __init__(
        self,
        settings: SwarmConfig,
        roster: Roster,
        procs: ChildProcesses,
        backoff: RespawnBackoff,
        hooks: SwarmHooks,
        *,
        fork: Fork,
        spawning: Callable[[int], bool],
        on_replaced: Callable[[int, str], None],
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._roster = roster
        self._procs = procs
        self._backoff = backoff
        self._hooks = hooks
        self._fork = fork
        self._spawning = spawning
        self._on_replaced = on_replaced
        self._clock = clock
        self.generation = 0  # bumped by each restart; every child remembers the one it was forked in
        self.plan: RestartPlan | None = None
        self._memory_hold: dict[int, float] = {}  # slot -> no memory restart before (one just failed)

    @property
    def restarting(self) -> bool:
        return self.plan is not None

    # Restarts -------------------------------------------------------------------------------
    def begin_restart(self, *, announced: bool = False) -> None:
        """Replace every slot's child. `announced`: the hooks heard restart_began already (when the
        signal came, before the new fork server had loaded the code)."""
        self.generation += 1
        phased = self._settings.phased_restart
        if self.plan is not None:
            log.info("restart_superseded", generation=self.plan.generation)
        self.plan = RestartPlan(self.generation, phased, pending=list(range(self._roster.count)))
        log.info("restart_began", phased=phased, generation=self.generation)
        if not announced:
            hook_calls.call(self._hooks.restart_began, phased)
        if phased:
            return
        for child in self._roster:
            if child.replaces is not None and not child.abandoned:
                self.give_up(child, "superseded by a restart of every child")
        self._retire_old_code()

    def advance(self) -> None:
        """Each loop turn: start the next slot's replacement, or end the restart when it is done."""
        plan = self.plan
        if plan is None:
            return
        if not plan.phased:
            self._retire_old_code()  # a child forked from the old fork server after the restart began
        slot = plan.next_slot(self._roster, self._spawning) if plan.phased else None
        old = self._roster.current(slot) if slot is not None else None
        if old is not None and not self._fork(old.slot, "restart", old):
            self.end_restart(ok=False, reason="fork failed")
        elif plan.finished(self._roster):
            self.end_restart(ok=True)

    def _retire_old_code(self) -> None:
        """Not phased: every current child of an older generation stops, and its slot is forked again."""
        for child in self._roster.currents():
            if child.generation < self.generation and not child.stopping:
                self.retire(child, "restart", respawn=True)

    def end_restart(self, *, ok: bool, reason: str = "") -> None:
        if self.plan is None:
            return
        (log.info if ok else log.error)(
            "restart_finished" if ok else "restart_failed",
            generation=self.plan.generation,
            **({"reason": reason, "note": "the remaining old children keep running"} if reason else {}),
        )
        self.plan = None
        hook_calls.call(self._hooks.restart_ended, ok)

    def cancel(self) -> None:
        """Stopping: whatever was left of a restart no longer matters."""
        self.plan = None

    # Replacements ---------------------------------------------------------------------------
    def on_ready(self, child: Child) -> None:
        if child.replaces is not None and not child.abandoned:
            self._promote(child)
        plan = self.plan
        if plan is not None and self._roster.is_current(child) and child.generation >= plan.generation:
            plan.slot_done(child.slot)

    def _promote(self, replacement: Child) -> None:
        """It reported ready: it becomes current, and only now is the old child stopped."""
        old = self._roster.promote(replacement)
        self._backoff.started(replacement.slot, at=replacement.started_at)
        reason = replacement.purpose
        log.info("child_replaced", reason=reason, old_pid=old.pid if old else None, **replacement.describe())
        self._on_replaced(replacement.slot, reason)
        if old is not None:
            self.retire(old, reason)

    def give_up(self, child: Child, why: str, *, alive: bool = True) -> None:
        """The replacement won't do (failed to boot, too slow, superseded): the old child stays."""
        if child.abandoned:
            return
        child.abandoned = True
        if alive:  # never signal a reaped pid: it may belong to another process by now
            self._procs.terminate(child)
        self._failed(child.purpose, why, old_pid=child.replaces, **child.describe())

    def spawn_failed(self, slot: int, purpose: str, why: str) -> None:
        """The fork server could not fork a replacement (or was lost before it answered)."""
        self._failed(purpose, why, slot=slot)

    def _failed(self, purpose: str, why: str, *, slot: int, **fields: object) -> None:
        log.error("replacement_failed", purpose=purpose, reason=why, slot=slot, **fields)
        if purpose in ("memory", "stuck"):
            self._memory_hold[slot] = self._clock() + self._settings.respawn_max_delay_s
        if self.plan is not None and self.plan.in_flight == slot:
            self.end_restart(ok=False, reason=why)

    def check_ready_deadlines(self) -> None:
        now = self._clock()
        for child in self._roster:
            if child.ready_deadline is not None and now >= child.ready_deadline and not child.abandoned:
                self.give_up(child, f"not ready within {self._settings.restart_ready_timeout_s}s")

    def retire(self, child: Child, reason: str, *, respawn: bool = False) -> None:
        child.retire_reason = reason
        child.respawn_on_exit = respawn
        self._procs.terminate(child)

    # Memory ---------------------------------------------------------------------------------
    def memory_candidates(self) -> list[Child]:
        """Current children a memory restart may replace now: ready, not already being replaced,
        and not in the hold that follows a failed memory replacement."""
        now = self._clock()
        return [
            c
            for c in self._roster.currents()
            if c.phase is Phase.READY
            and c.retire_reason is None
            and self._roster.replacement_for(c.slot) is None
            and not self._spawning(c.slot)
            and now >= self._memory_hold.get(c.slot, 0.0)
        ]

    def replace_for_memory(self, child: Child) -> None:
        self._fork(child.slot, "memory", child)

    # Stuck jobs -----------------------------------------------------------------------------
    def replace_stuck(self) -> None:
        """Each loop turn: a child that reported a stuck job is replaced like a memory restart (the
        replacement is forked and ready before the old child is asked to stop). One whose replacement
        failed is tried again after the same hold; meanwhile it runs on with the threads it has."""
        for child in self.memory_candidates():
            if child.stuck_jobs:
                log.warning(
                    "replacing_child_with_stuck_job",
                    stuck_jobs=child.stuck_jobs,
                    jid=child.last_stuck.get("jid"),
                    job=child.last_stuck.get("job"),
                    note="the job was filed as failed with JobTimeout; the child's other jobs finish",
                    **child.describe(),
                )
                self._fork(child.slot, "stuck", child)
