"""What the swarm does with the lines a child writes on its state pipe (wire/child_lines.py).

Every line moves the child through its phases (child.py) and goes to the hooks; a few also act. A
child's `ready` may complete its replacement or a restart's step (replacements.py), and a child of a
quiet slot is told to be quiet once it is ready to hear it. A `status` that says a quiet child
fetches again (a remote `resume`) lifts its slot's quiet. A child `stopping` by its own choice is
held to the graceful-stop deadline, as if the swarm had asked. Garbage on a pipe is logged, and
counts as a sign of life all the same.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from supervisor.children.child import Child, Phase
from supervisor.children.processes import ChildProcesses
from supervisor.children.replacements import Replacements
from supervisor.config import SwarmConfig
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks
from supervisor.wire.child_lines import Garbage, Message

log = structlog.get_logger("cogworker.swarm")


class ChildMessages:
    def __init__(
        self,
        settings: SwarmConfig,
        procs: ChildProcesses,
        replacements: Replacements,
        hooks: SwarmHooks,
        *,
        quiet_slots: set[int],
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._procs = procs
        self._replacements = replacements
        self._hooks = hooks
        self._quiet_slots = quiet_slots  # the swarm's set: a resumed child takes its slot out of it
        self._clock = clock

    def read(self, child: Child) -> None:
        """Everything the child's pipe holds now."""
        for item in self._procs.read(child):
            if isinstance(item, Garbage):
                child.last_heard = self._clock()  # noise, but a sign of life
                log.warning("child_sent_garbage", reason=item.reason, sample=item.sample, **child.describe())
            else:
                self.on_message(child, item)

    def on_message(self, child: Child, message: Message) -> None:
        was_quiet = child.quiet
        before = child.apply(message, self._clock())
        event = message.event
        hook_calls.call(self._hooks.child_event, child, event, message.fields)
        if event == "booted" and before is Phase.FORKED:
            log.info("child_booted", **child.describe())
        elif event == "ready" and before is not Phase.READY and child.phase is Phase.READY:
            log.info("child_ready", uptime_s=round(child.uptime(self._clock()), 3), **child.describe())
            if child.slot in self._quiet_slots:
                self._procs.quiet(child)
            self._replacements.on_ready(child)
        elif event == "status":
            hook_calls.call(self._hooks.child_status, child, child.status)
            if was_quiet and not child.quiet and child.phase is Phase.READY:
                log.info("child_resumed", **child.describe())
                self._quiet_slots.discard(child.slot)
                child.quiet_requested = False
        elif event == "stopping" and child.stop_deadline is None:
            # It stops by its own choice (a remote `stop`): hold it to the same deadline.
            child.stop_deadline = self._clock() + self._settings.graceful_stop_timeout_s
        elif event == "boot_error":
            log.error("child_boot_error", error=child.boot_error, **child.describe())
