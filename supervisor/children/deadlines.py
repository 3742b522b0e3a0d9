"""When a child has run out of time, and why: the deadlines the swarm holds every child to.

- A stopping child (TERMed, or stopping by its own choice) is a straggler once its graceful-stop
  deadline passes: SIGKILL, and its jobs are requeued.
- A child that has said nothing yet is importing the app (without preload each child imports it
  itself, and a big app takes longer than a hang would): only the generous boot timeout applies.
- Once it has spoken, a child silent longer than the liveness timeout is hung.

Pure bookkeeping (swarm.py kills what this names), so the rules are tested with a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from supervisor.children.child import Child, Phase
from supervisor.config import SwarmConfig


@dataclass(frozen=True, slots=True)
class Overdue:
    reason: str  # straggler, boot_timeout, hung: what the kill is recorded as
    event: str  # the log line's name
    expected: bool  # a straggler is logged as a warning (a slow drain), the others as errors
    fields: dict[str, Any] = field(default_factory=dict)  # for the log line


def overdue(child: Child, now: float, settings: SwarmConfig) -> Overdue | None:
    """Why `child` must be killed now, or None."""
    if child.kill_reason is not None:
        return None  # SIGKILLed already: only waiting to be reaped
    if child.stop_deadline is not None and now >= child.stop_deadline:
        return Overdue("straggler", "straggler_killed", True, {"after_s": settings.graceful_stop_timeout_s})
    if child.stopping:
        return None
    if child.phase is Phase.FORKED:
        if child.uptime(now) <= settings.boot_timeout_s:
            return None
        return Overdue("boot_timeout", "child_boot_timeout", False, {"after_s": round(child.uptime(now), 2)})
    if child.silent_for(now) <= settings.liveness_timeout_s:
        return None
    silent = round(child.silent_for(now), 2)
    return Overdue("hung", "child_hung", False, {"silent_s": silent, "phase": child.phase.value})
