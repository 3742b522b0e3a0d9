"""What plugs into the swarm's hooks: systemd's notify protocol and Prometheus metrics.

Both run on the event loop's thread and must never block it: the notifier's socket is non-blocking,
and the metrics only update in-memory counters (scrapes are served from their own threads).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from supervisor.child import Child, ExitOutcome
from supervisor.hooks import SwarmHooks, SwarmView, call
from supervisor.notify import Notifier

if TYPE_CHECKING:  # metrics loads the Redis client: only a swarm with COGWORKER_METRICS_PORT pays for it
    from supervisor.metrics import SwarmMetrics

# While a drain runs, systemd's stop timeout is pushed out to the swarm's own deadline plus this
# margin: the supervisor still has to kill stragglers and requeue their jobs after the deadline.
STOP_MARGIN_S = 10.0
EXTEND_EVERY_S = 2.0


class NotifyHooks(SwarmHooks):
    """READY once every slot is ready; STATUS on change; WATCHDOG from the loop itself;
    RELOADING/READY around restarts; STOPPING and EXTEND_TIMEOUT_USEC while stopping."""

    def __init__(self, notifier: Notifier, clock: Callable[[], float] = time.monotonic) -> None:
        self._notifier = notifier
        self._clock = clock
        self._watchdog_s = notifier.watchdog_interval_s()
        self._next_watchdog = 0.0
        self._next_extend = 0.0
        self._ready_sent = False
        self._reloading = False

    def wakeup_in(self) -> float | None:
        if self._watchdog_s is None:
            return None
        return max(0.0, self._next_watchdog - self._clock())

    def tick(self, view: SwarmView) -> None:
        now = self._clock()
        if self._watchdog_s is not None and now >= self._next_watchdog:
            self._notifier.watchdog()
            self._next_watchdog = now + self._watchdog_s
        if view.stopping and view.stop_deadline_in_s is not None and now >= self._next_extend:
            self._notifier.extend_timeout(view.stop_deadline_in_s + STOP_MARGIN_S)
            self._next_extend = now + EXTEND_EVERY_S

    def state_changed(self, view: SwarmView) -> None:
        summary = view.summary()
        # Not while reloading: every old child is still ready, but the READY=1 that ends the reload
        # is restart_ended's.
        ready = not view.stopping and view.count > 0 and view.ready >= view.count
        if ready and not self._ready_sent and not self._reloading:
            self._ready_sent = True
            self._notifier.ready(summary)
        else:
            self._notifier.status(summary)

    def restart_began(self, phased: bool) -> None:
        self._reloading = True
        self._notifier.reloading()

    def restart_ended(self, ok: bool) -> None:
        # Also after a failed restart: the old children kept running, so the service is ready.
        if self._reloading:
            self._reloading = False
            self._ready_sent = True
            self._notifier.ready()

    def stop_began(self, deadline_s: float) -> None:
        self._notifier.stopping()
        self._notifier.extend_timeout(deadline_s + STOP_MARGIN_S)
        self._next_extend = self._clock() + EXTEND_EVERY_S


class MetricsHooks(SwarmHooks):
    """Feeds SwarmMetrics from children's lines, exits, replacements and recoveries."""

    def __init__(self, metrics: SwarmMetrics) -> None:
        self.metrics = metrics

    def child_started(self, child: Child) -> None:
        self.metrics.child_started(child.slot, child.pid)

    def child_event(self, child: Child, event: str, fields: Mapping[str, Any]) -> None:
        self.metrics.observe_status(child.slot, {"event": event, **fields}, pid=child.pid)

    def child_exited(self, child: Child, outcome: ExitOutcome) -> None:
        self.metrics.child_exited(child.slot, child.pid)

    def child_replaced(self, slot: int, reason: str) -> None:
        self.metrics.child_restarted(reason)

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        self.metrics.jobs_recovered(moved, seconds)


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
