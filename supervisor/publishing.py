"""Telling the outside what the swarm looks like after each loop turn: a log line and the process
title when its capacity changes, and the hooks (systemd notify, metrics) every turn."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks, SwarmView

log = structlog.get_logger("cogworker.swarm")


class Publisher:
    def __init__(self, hooks: SwarmHooks, set_title: Callable[[str], None]) -> None:
        self._hooks = hooks
        self._set_title = set_title
        self.last: SwarmView | None = None

    def publish(self, view: SwarmView) -> None:
        last = self.last
        if last is None or (view.children, view.ready, view.state) != (last.children, last.ready, last.state):
            log.info(
                "swarm_capacity", children=view.children, ready=view.ready, count=view.count, state=view.state
            )
            self._set_title(f"cogworker-swarm [{view.children} children, {view.ready} ready] {view.state}")
        if view != last:
            hook_calls.call(self._hooks.state_changed, view)
        self.last = view
        hook_calls.call(self._hooks.tick, view)
