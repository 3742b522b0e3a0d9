"""What the swarm tells systemd, and when: the notify hooks, on top of the transport in notify.py.

READY=1 once every slot is ready; STATUS= when the summary changes; WATCHDOG=1 from the loop itself,
so a hung loop is what starves the watchdog; RELOADING=1 and READY=1 around a restart; STOPPING=1 and
EXTEND_TIMEOUT_USEC while a stop drains. These run on the event loop's thread and never block it: the
notifier's socket is non-blocking.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from supervisor.integrations.hooks import SwarmHooks, SwarmView
from supervisor.integrations.notify import Notifier

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
