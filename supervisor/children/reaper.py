"""Reaping: every process of the supervisor's that exited, taken in as the loop finds it.

A fork server's exit is the spawner's business. A child's last lines are read first (a `boot_error`
or `stopped` may still be in its pipe), its pipe closed, and it leaves the roster; its exit is named
(`classify_exit`) and logged, and when it died holding jobs the spawner is asked at once to requeue
them, before anything can be respawned in its slot ("A child dies" in docs/architecture.md). What
the exit means for the slot is the swarm's decision (supervisor/swarm.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import structlog

from supervisor.children.child import Child, ExitOutcome, classify_exit
from supervisor.children.messages import ChildMessages
from supervisor.children.processes import ChildProcesses
from supervisor.children.roster import Roster
from supervisor.children.spawner import Spawner
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks
from supervisor.system import System

log = structlog.get_logger("cogworker.swarm")


class Reaper:
    def __init__(
        self,
        system: System,
        roster: Roster,
        procs: ChildProcesses,
        messages: ChildMessages,
        spawner: Spawner,
        hooks: SwarmHooks,
        clock: Callable[[], float],
    ) -> None:
        self._system = system
        self._roster = roster
        self._procs = procs
        self._messages = messages
        self._spawner = spawner
        self._hooks = hooks
        self._clock = clock

    def reap(self) -> Iterator[tuple[Child, bool, ExitOutcome]]:
        """Each child that exited, as (child, whether it was its slot's current child, its exit),
        reaped one at a time as the caller asks for the next."""
        for pid, code in self._system.reap():
            if self._spawner.reaped(pid, code):
                continue
            child = self._roster.get(pid)
            if child is None:
                log.warning("unknown_child_reaped", pid=pid, exit_code=code)
                continue
            self._messages.read(child)  # its last lines (boot_error, stopped) are still in the pipe
            self._procs.close_pipe(child)
            _, was_current = self._roster.pop(pid)
            outcome = classify_exit(child, code)
            self._exited(child, outcome)
            yield child, was_current, outcome

    def _exited(self, child: Child, outcome: ExitOutcome) -> None:
        (log.info if outcome.clean else log.warning)(
            "child_exited",
            reason=outcome.reason,
            exit_code=outcome.code,
            signal=outcome.signal_name,
            uptime_s=round(child.uptime(self._clock()), 3),
            requeue=outcome.jobs_stranded,
            **child.describe(),
        )
        if outcome.jobs_stranded:
            # Asked before anything is respawned, and the fork server answers in order: a dead
            # child's jobs are back on their queues before its slot fetches again.
            self._spawner.requeue_jobs_of(child.identity)
        hook_calls.call(self._hooks.child_exited, child, outcome)
