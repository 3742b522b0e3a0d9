"""Where systemd notify and metrics plug into the swarm.

The event loop calls these at fixed points; every method here does nothing. A notify integration
subclasses SwarmHooks and sends READY=1 when `view.ready == view.count` (and no restart is running),
STATUS= when the view's summary changes, WATCHDOG=1 from `tick`, RELOADING=1/READY=1 around
`restart_began`/`restart_ended`, STOPPING=1 from `stop_began`, EXTEND_TIMEOUT_USEC from `tick` while
`view.stop_deadline_in_s` is set. A metrics integration reads children's latest status from
`child_status` (and job counts from any line through `child_event`), counts restarts by reason from
`child_replaced`, and recovery latency from `jobs_requeued`.

Hooks run on the event loop's thread and must not block (or raise: the swarm logs and carries on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from supervisor.children.child import Child, ExitOutcome
from supervisor.children.roster import Roster

log = structlog.get_logger("cogworker.swarm")


@dataclass(frozen=True, slots=True)
class SwarmView:
    """A snapshot of the swarm after a loop turn."""

    count: int  # slots (COGWORKER_COUNT)
    children: int  # live child processes (replacements and draining ones included)
    ready: int  # ready capacity: current children fetching jobs
    busy: int
    threads: int
    processed: int
    failed: int
    redis_down: int  # children reporting Redis unreachable
    quiet: bool
    restarting: bool
    stopping: bool
    stop_deadline_in_s: float | None  # seconds until stragglers are killed, while stopping
    stuck_replaced: int = 0  # children replaced for a job stuck past its time limit, since start

    @classmethod
    def of(
        cls,
        roster: Roster,
        *,
        quiet: bool,
        restarting: bool,
        stopping: bool,
        now: float,
        stuck_replaced: int = 0,
    ) -> SwarmView:
        statuses = [c.status for c in roster]
        deadlines = [c.stop_deadline - now for c in roster if c.stop_deadline is not None]
        return cls(
            count=roster.count,
            children=len(roster),
            ready=roster.ready,
            busy=_total(statuses, "busy"),
            threads=_total(statuses, "threads"),
            processed=_total(statuses, "processed"),
            failed=_total(statuses, "failed"),
            redis_down=sum(1 for s in statuses if s.get("redis") == "down"),
            quiet=quiet,
            restarting=restarting,
            stopping=stopping,
            stop_deadline_in_s=max(0.0, min(deadlines)) if stopping and deadlines else None,
            stuck_replaced=stuck_replaced,
        )

    @property
    def state(self) -> str:
        if self.stopping:
            return "stopping"
        if self.restarting:
            return "restarting"
        if self.ready < self.count:
            return "starting" if self.ready == 0 else "degraded"
        return "quiet" if self.quiet else "running"

    def summary(self) -> str:
        """One line for STATUS= and the process title's long form."""
        redis = f"redis down in {self.redis_down}" if self.redis_down else "redis up"
        stuck = f", {self.stuck_replaced} replaced for stuck jobs" if self.stuck_replaced else ""
        return (
            f"{self.state}: {self.ready}/{self.count} ready, {self.busy}/{self.threads} busy, "
            f"{self.processed} processed, {self.failed} failed, {redis}{stuck}"
        )


class SwarmHooks:
    """No-op hooks; subclass and override what you need."""

    def wakeup_in(self) -> float | None:
        """The loop wakes at least this often (e.g. half the watchdog interval); None: no need."""
        return None

    def tick(self, view: SwarmView) -> None:
        """Every loop turn, after reconciling."""

    def state_changed(self, view: SwarmView) -> None:
        """The view differs from the previous turn's."""

    def child_started(self, child: Child) -> None:
        """A child was forked."""

    def child_status(self, child: Child, status: Mapping[str, Any]) -> None:
        """A child's periodic status line (busy, threads, processed, failed, redis, quiet, jobs)."""

    def child_event(self, child: Child, event: str, fields: Mapping[str, Any]) -> None:
        """Every line a child sends (status included), e.g. for job counts riding on `stopped`."""

    def child_exited(self, child: Child, outcome: ExitOutcome) -> None:
        """A child was reaped; `outcome.reason` says why it ended."""

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        """A dead child's in-progress list was requeued, `seconds` after its death was seen."""

    def child_replaced(self, slot: int, reason: str) -> None:
        """A slot got a new child: crash, signal, hung, straggler, memory, stuck, restart or exit."""

    def restart_began(self, phased: bool) -> None:
        """HUP/USR2: a new fork server is loading the code on disk; children are replaced next."""

    def restart_ended(self, ok: bool) -> None:
        """Every slot runs the new code (ok), or the restart gave up and old children keep running."""

    def stop_began(self, deadline_s: float) -> None:
        """TERM/INT (or a boot error): children drain; stragglers are killed `deadline_s` from now."""


def _total(statuses: list[dict[str, Any]], key: str) -> int:
    return sum(int(s[key]) for s in statuses if isinstance(s.get(key), int | float))


def call(hook: Callable[..., None], *args: Any) -> None:
    """Call one hook; a failing hook is logged, never allowed to break the event loop."""
    try:
        hook(*args)
    except Exception:
        log.exception("hook_failed", hook=getattr(hook, "__qualname__", repr(hook)))


class AllHooks(SwarmHooks):
    """Several hooks as one: each called in turn, one failing doesn't stop the others; the loop
    wakes for the soonest."""

    def __init__(self, hooks: Sequence[SwarmHooks]) -> None:
        self.hooks = list(hooks)

    def _each(self, name: str, *args: Any) -> None:
        for hook in self.hooks:
            call(getattr(hook, name), *args)

    def wakeup_in(self) -> float | None:
        waits = [w for h in self.hooks if (w := h.wakeup_in()) is not None]
        return min(waits) if waits else None

    def tick(self, view: SwarmView) -> None:
        self._each("tick", view)

    def state_changed(self, view: SwarmView) -> None:
        self._each("state_changed", view)

    def child_started(self, child: Child) -> None:
        self._each("child_started", child)

    def child_status(self, child: Child, status: Mapping[str, Any]) -> None:
        self._each("child_status", child, status)

    def child_event(self, child: Child, event: str, fields: Mapping[str, Any]) -> None:
        self._each("child_event", child, event, fields)

    def child_exited(self, child: Child, outcome: ExitOutcome) -> None:
        self._each("child_exited", child, outcome)

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        self._each("jobs_requeued", identity, moved, seconds)

    def child_replaced(self, slot: int, reason: str) -> None:
        self._each("child_replaced", slot, reason)

    def restart_began(self, phased: bool) -> None:
        self._each("restart_began", phased)

    def restart_ended(self, ok: bool) -> None:
        self._each("restart_ended", ok)

    def stop_began(self, deadline_s: float) -> None:
        self._each("stop_began", deadline_s)
