"""The swarm: one thread, one loop. Wait for an event, dispatch it, reconcile.

Events are signals (through the self-pipe, signals.py) and lines from children's state pipes
(protocol.py). Reconciling is where things happen: reap exited children (requeueing the jobs of any
that died abnormally before its slot is respawned), respawn slots whose backoff has run out, advance a
restart, kill stragglers and hung children, watch memory, then tell the hooks (systemd notify,
metrics) what the swarm looks like now. This module decides; processes.py forks and signals.
"""

from __future__ import annotations

import os
import selectors
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes
from cogworker.settings import Settings
from supervisor import hooks as hook_calls
from supervisor import reexec
from supervisor.backoff import RespawnBackoff
from supervisor.child import Child, ExitOutcome, Phase, classify_exit
from supervisor.hooks import SwarmHooks, SwarmView
from supervisor.memory import MB, MemoryWatch
from supervisor.processes import ChildProcesses
from supervisor.protocol import Garbage, Message
from supervisor.replacements import Replacements
from supervisor.requeue import Requeuer
from supervisor.roster import Roster
from supervisor.signals import ACTIONS, SignalPipe

log = structlog.get_logger("cogworker.swarm")

TICK_S = 0.5  # the loop wakes at least this often: liveness, replacement deadlines, memory


class Swarm:
    def __init__(
        self,
        settings: Settings,
        signal_pipe: SignalPipe,
        *,
        app_loaded: bool = False,
        hooks: SwarmHooks | None = None,
        handover: reexec.Handover | None = None,
        argv: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.signal_pipe = signal_pipe
        self.app_loaded = app_loaded
        self.hooks = hooks or SwarmHooks()
        self.argv = list(argv)
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.roster = Roster(settings.count)
        self.procs = ChildProcesses(settings, self.roster, self.selector, signal_pipe, self.hooks, clock)
        self.backoff = RespawnBackoff(
            clock,
            healthy_uptime_s=settings.healthy_uptime_s,
            base_delay_s=settings.respawn_base_delay_s,
            max_delay_s=settings.respawn_max_delay_s,
        )
        self.requeuer = Requeuer(settings, clock, on_done=self._on_requeued)
        self.memory = MemoryWatch(settings.maxmem_mb, settings.memory_check_interval_s, clock)
        self.replacements = Replacements(
            settings,
            self.roster,
            self.procs,
            self.backoff,
            self.hooks,
            fork=lambda slot, purpose, old: self._fork(slot, purpose, replaces=old),
            on_replaced=self._count_replaced,
            clock=clock,
        )
        self._handover = handover
        self.quiet_slots: set[int] = set()
        self.stopping = False
        self.exit_code = exitcodes.OK
        self.replaced = Counter[str]()  # why slots got new children: crash, hung, memory, restart…
        self._respawn_reasons: dict[int, str] = {}
        self._last_view: SwarmView | None = None

    # The loop -------------------------------------------------------------------------------
    def run(self) -> int:
        self._start()
        while not (self.stopping and len(self.roster) == 0):
            try:
                for key, _ in self.selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals()
                    else:
                        self._on_readable(key.data)
                self._reconcile()
            except Exception:
                self._on_loop_error()
        self._finish()
        return self.exit_code

    def _reconcile(self) -> None:
        self._reap()
        self.requeuer.retry_due()
        self._respawn_due()
        if not self.stopping:
            self.replacements.advance()
        self._enforce_deadlines()
        self._watch_memory()
        self._publish()

    def _on_loop_error(self) -> None:
        """A bug in the loop: stop gracefully rather than die, since dying SIGKILLs every child
        (PDEATHSIG) in the middle of its jobs. A second error while stopping is let through."""
        log.exception("swarm_loop_error", note="stopping the swarm")
        if self.stopping:
            raise
        self.stop("internal error")
        self.exit_code = exitcodes.FAILURE

    def _timeout(self) -> float:
        try:
            hook_wait = self.hooks.wakeup_in()
        except Exception:
            log.exception("hook_failed", hook="wakeup_in")
            hook_wait = None
        waits = [TICK_S, self.backoff.next_due_in(), self.memory.next_due_in(), hook_wait]
        now = self.clock()
        # (A child already SIGKILLed keeps its passed deadline; it must not spin the loop until reaped.)
        waits += [
            c.stop_deadline - now for c in self.roster if c.stop_deadline is not None and not c.kill_reason
        ]
        return max(0.0, min(w for w in waits if w is not None))

    # Start and finish -----------------------------------------------------------------------
    def _start(self) -> None:
        self.selector.register(self.signal_pipe.fileno, selectors.EVENT_READ, None)
        s, handover = self.settings, self._handover
        log.info(
            "swarm_starting",
            count=s.count,
            preload=s.preload,
            phased_restart=s.phased_restart,
            adopting=len(handover.children) if handover else 0,
        )
        if handover is not None:
            self._adopt(handover)
            self._handover = None
            # The restart opens a new generation before vacant slots are forked: those run new code.
            if self.app_loaded:
                self.replacements.begin_restart()
            else:
                log.error(
                    "restart_failed",
                    reason="the app failed to import in the re-exec'd supervisor",
                    note="the running children keep the code they started with",
                )
                hook_calls.call(self.hooks.restart_ended, False)
        for slot in self.roster.vacant_slots():
            self._fork(slot, "start")

    def _adopt(self, handover: reexec.Handover) -> None:
        now = self.clock()
        self.quiet_slots = set(handover.quiet_slots)
        self.requeuer.pending.update(handover.pending_requeues)
        for a in handover.children:
            child = reexec.adopted(a, now)
            self.procs.add(child, current=a.current)
            log.info("child_adopted", phase=child.phase.value, current=a.current, **child.describe())
            hook_calls.call(self.hooks.child_started, child)
            if a.current:
                self.backoff.started(a.slot, at=a.started_at)
            elif child.term_sent_at is None:
                # A replacement the old image was waiting for: the new restart replaces every slot.
                self.replacements.give_up(child, "superseded by the re-exec")

    def _finish(self) -> None:
        self.requeuer.retry_due(force=True)
        if self.requeuer.pending:
            log.error(
                "requeue_pending_at_exit",
                identities=sorted(self.requeuer.pending),
                note="Redis unreachable: heartbeat orphan recovery in any live process requeues them",
            )
            if self.exit_code == exitcodes.OK:
                self.exit_code = exitcodes.FAILURE  # jobs are stranded until then: not a clean stop
        log.info("swarm_stopped", exit_code=self.exit_code)
        self.selector.close()

    # Signals: the seams (arq's handle_sig); tests may call these directly ----------------------
    def _on_signals(self) -> None:
        handlers: dict[str, Callable[[], None]] = {
            "stop": self.stop,
            "quiet": self.quiet,
            "restart": self.restart_children,
            "dump": self.procs.dump_stacks,
        }
        for signum in self.signal_pipe.drain():
            action = ACTIONS.get(signum)
            if action in handlers:  # "reap" needs nothing: every turn reaps
                log.info("signal_received", signal=signum.name, action=action)
                handlers[action]()

    def stop(self, reason: str = "signal") -> None:
        if self.stopping:
            log.info("swarm_already_stopping")
            return
        self.stopping = True
        self.backoff.cancel_all()
        self.replacements.cancel()
        timeout = self.settings.graceful_stop_timeout_s
        log.info("swarm_stopping", reason=reason, children=len(self.roster), graceful_timeout_s=timeout)
        hook_calls.call(self.hooks.stop_began, timeout)
        for child in self.roster:
            self.procs.terminate(child)

    def quiet(self) -> None:
        """Stop fetching everywhere, now and in every child forked from now on."""
        self.quiet_slots = set(range(self.settings.count))
        log.info(
            "swarm_quiet", note="children finish running jobs and fetch no more; undo with remote resume"
        )
        for child in self.roster:
            self.procs.quiet(child)

    def restart_children(self) -> None:
        if self.stopping:
            log.info("restart_ignored", reason="stopping")
        elif self.settings.preload:
            self._reexec()
        else:
            self.replacements.begin_restart()

    # Child pipes ----------------------------------------------------------------------------
    def _on_readable(self, child: Child) -> None:
        for item in self.procs.read(child):
            if isinstance(item, Garbage):
                child.last_heard = self.clock()  # noise, but a sign of life
                log.warning("child_sent_garbage", reason=item.reason, sample=item.sample, **child.describe())
            else:
                self._on_message(child, item)

    def _on_message(self, child: Child, message: Message) -> None:
        was_quiet = child.quiet
        before = child.apply(message, self.clock())
        event = message.event
        hook_calls.call(self.hooks.child_event, child, event, message.fields)
        if event == "booted" and before is Phase.FORKED:
            log.info("child_booted", **child.describe())
        elif event == "ready" and before is not Phase.READY and child.phase is Phase.READY:
            log.info("child_ready", uptime_s=round(child.uptime(self.clock()), 3), **child.describe())
            if child.slot in self.quiet_slots:
                self.procs.quiet(child)
            self.replacements.on_ready(child)
        elif event == "status":
            hook_calls.call(self.hooks.child_status, child, child.status)
            if was_quiet and not child.quiet and child.phase is Phase.READY:
                log.info("child_resumed", **child.describe())
                self.quiet_slots.discard(child.slot)
                child.quiet_requested = False
        elif event == "stopping" and child.stop_deadline is None:
            # It stops by its own choice (a remote `stop`): hold it to the same deadline.
            child.stop_deadline = self.clock() + self.settings.graceful_stop_timeout_s
        elif event == "boot_error":
            log.error("child_boot_error", error=child.boot_error, **child.describe())

    # Reaping --------------------------------------------------------------------------------
    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            child = self.roster.get(pid)
            if child is None:
                log.warning("unknown_child_reaped", pid=pid, exit_code=code)
                continue
            self._on_readable(child)  # its last lines (boot_error, stopped) are still in the pipe
            self.procs.close_pipe(child)
            _, was_current = self.roster.pop(pid)
            self._on_exit(child, was_current, classify_exit(child, code))

    def _on_exit(self, child: Child, was_current: bool, outcome: ExitOutcome) -> None:
        (log.info if outcome.clean else log.warning)(
            "child_exited",
            reason=outcome.reason,
            exit_code=outcome.code,
            signal=outcome.signal_name,
            uptime_s=round(child.uptime(self.clock()), 3),
            requeue=outcome.requeue,
            **child.describe(),
        )
        if outcome.requeue:
            self.requeuer.requeue(child.identity)  # before anything is respawned (DESIGN §4.3)
        hook_calls.call(self.hooks.child_exited, child, outcome)
        if self.stopping:
            if not outcome.clean and self.exit_code == exitcodes.OK:
                self.exit_code = exitcodes.FAILURE
        elif child.replaces is not None or child.abandoned:
            why = child.boot_error or f"replacement exited ({outcome.reason}, code {outcome.code})"
            self.replacements.give_up(child, why, alive=False)
        elif not was_current:
            pass  # retired: its replacement already serves the slot
        elif (replacement := self.roster.replacement_for(child.slot)) is not None:
            self.roster.promote(replacement)  # it serves the slot from now on, ready or not yet
            self.backoff.started(child.slot, at=replacement.started_at)
        elif outcome.boot_error:
            log.error(
                "swarm_halting_boot_error",
                error=child.boot_error or f"child exited {outcome.code} (BOOT_ERROR)",
                note="the app (COGWORKER_REQUIRE) can't be imported: fix it and start the swarm again",
            )
            self.stop("boot_error")
            self.exit_code = exitcodes.BOOT_ERROR
        else:
            self._respawn_reasons[child.slot] = outcome.reason
            if child.respawn_on_exit:
                self.backoff.schedule_now(child.slot)  # a restart in place is no crash
            else:
                crash = self.backoff.crashed(child.slot)
                log.warning(
                    "respawn_scheduled",
                    slot=child.slot,
                    delay_s=crash.delay_s,
                    streak=crash.streak,
                    after=outcome.reason,
                )

    def _on_requeued(self, identity: str, moved: int, seconds: float) -> None:
        hook_calls.call(self.hooks.jobs_requeued, identity, moved, seconds)

    def _respawn_due(self) -> None:
        if self.stopping:
            return
        for slot in self.backoff.due():
            if self.roster.current(slot) is None and self._fork(slot, "respawn") is not None:
                self._count_replaced(slot, self._respawn_reasons.pop(slot, "respawn"))

    def _count_replaced(self, slot: int, reason: str) -> None:
        self.replaced[reason] += 1
        hook_calls.call(self.hooks.child_replaced, slot, reason)

    def _fork(self, slot: int, purpose: str, *, replaces: Child | None = None) -> Child | None:
        try:
            child = self.procs.fork(
                slot,
                purpose,
                generation=self.replacements.generation,
                app_loaded=self.app_loaded,
                quiet=slot in self.quiet_slots,
                replaces=replaces,
            )
        except OSError as exc:
            retry = self.backoff.fork_failed(slot) if replaces is None else None
            log.error("fork_failed", slot=slot, purpose=purpose, error=str(exc), retry_in_s=retry)
            return None
        if replaces is None:
            self.backoff.started(slot)
        hook_calls.call(self.hooks.child_started, child)
        return child

    # Restarts -------------------------------------------------------------------------------
    def _reexec(self) -> None:
        handover = reexec.handover_of(self.roster, self.quiet_slots, self.requeuer.pending)
        log.info("swarm_reexec", children=len(handover.children), note="loading the code on disk now")
        # Announced before the exec (systemd sees the reload begin now); the new image ends it.
        hook_calls.call(self.hooks.restart_began, self.settings.phased_restart)
        try:
            reexec.exec_self(handover, self.argv)
        except OSError as exc:
            log.error("restart_failed", reason=f"re-exec failed: {exc}", note="the old children keep running")
            hook_calls.call(self.hooks.restart_ended, False)

    # Deadlines and memory -------------------------------------------------------------------
    def _enforce_deadlines(self) -> None:
        now, s = self.clock(), self.settings
        for child in self.roster:
            if child.kill_reason is not None:
                continue
            if child.stop_deadline is not None and now >= child.stop_deadline:
                log.warning("straggler_killed", after_s=s.graceful_stop_timeout_s, **child.describe())
                self.procs.kill(child, "straggler")
            elif not child.stopping and child.silent_for(now) > s.liveness_timeout_s:
                silent = round(child.silent_for(now), 2)
                log.error("child_hung", silent_s=silent, phase=child.phase.value, **child.describe())
                self.procs.kill(child, "hung")
        self.replacements.check_ready_deadlines()

    def _watch_memory(self) -> None:
        if self.stopping or not self.memory.due():
            return
        candidates = {c.pid: c for c in self.replacements.memory_candidates()}
        for pid, rss in self.memory.over_limit(candidates):
            child = candidates[pid]
            mb = round(rss / MB, 1)
            log.warning(
                "child_over_memory_limit", rss_mb=mb, limit_mb=self.memory.limit_mb, **child.describe()
            )
            self.replacements.replace_for_memory(child)

    # Publishing -----------------------------------------------------------------------------
    def view(self) -> SwarmView:
        return SwarmView.of(
            self.roster,
            quiet=bool(self.quiet_slots),
            restarting=self.replacements.restarting,
            stopping=self.stopping,
            now=self.clock(),
        )

    def latest_status(self) -> dict[int, dict[str, Any]]:
        """pid -> the child's latest status line (for metrics)."""
        return {c.pid: dict(c.status) for c in self.roster}

    def _publish(self) -> None:
        view, last = self.view(), self._last_view
        if last is None or (view.children, view.ready, view.state) != (last.children, last.ready, last.state):
            log.info(
                "swarm_capacity", children=view.children, ready=view.ready, count=view.count, state=view.state
            )
            setproctitle(f"cogworker-swarm [{view.children} children, {view.ready} ready] {view.state}")
        if view != last:
            hook_calls.call(self.hooks.state_changed, view)
        self._last_view = view
        hook_calls.call(self.hooks.tick, view)
