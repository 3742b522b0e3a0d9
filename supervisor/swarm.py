"""The swarm: one thread, one loop. Wait for an event, dispatch it, reconcile.

Events are signals (through the self-pipe, signals.py) and lines from children's state pipes
(protocol.py). Reconciling is where things happen: reap exited children (requeueing the jobs of any
that died abnormally before respawning its slot), respawn slots whose backoff has run out, advance a
restart, kill stragglers and hung children, watch memory, then tell the hooks (systemd notify,
metrics) what the swarm looks like now.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes
from cogworker.settings import Settings
from supervisor import reexec
from supervisor.backoff import RespawnBackoff
from supervisor.child import Child, ExitOutcome, Phase, classify_exit
from supervisor.hooks import SwarmHooks, SwarmView
from supervisor.memory import MB, MemoryWatch
from supervisor.protocol import Garbage, LineBuffer, Message
from supervisor.requeue import Requeuer
from supervisor.restart import RestartPlan
from supervisor.roster import Roster
from supervisor.signals import ACTIONS, SignalPipe
from supervisor.spawn import spawn

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
        self.backoff = RespawnBackoff(
            clock,
            healthy_uptime_s=settings.healthy_uptime_s,
            base_delay_s=settings.respawn_base_delay_s,
            max_delay_s=settings.respawn_max_delay_s,
        )
        self.requeuer = Requeuer(settings, clock, on_done=self._on_requeued)
        self.memory = MemoryWatch(settings.maxmem_mb, settings.memory_check_interval_s, clock)
        self._handover = handover
        self.generation = 0
        self.restart: RestartPlan | None = None
        self.quiet_slots: set[int] = set()
        self.stopping = False
        self.exit_code = exitcodes.OK
        self.replaced = Counter[str]()  # why slots got new children: crash, hung, memory, restart…
        self._respawn_reasons: dict[int, str] = {}
        self._memory_hold: dict[int, float] = {}  # slot -> no memory restart before (one just failed)
        self._last_view: SwarmView | None = None

    # The loop -------------------------------------------------------------------------------
    def run(self) -> int:
        self._start()
        while not (self.stopping and len(self.roster) == 0):
            for key, _ in self.selector.select(self._timeout()):
                if key.data is None:
                    self._on_signals()
                else:
                    self._read(key.data)
            self._reconcile()
        self._finish()
        return self.exit_code

    def _reconcile(self) -> None:
        self._reap()
        self.requeuer.retry_due()
        self._respawn_due()
        self._advance_restart()
        self._kill_stragglers()
        self._check_liveness()
        self._watch_memory()
        self._publish()

    def _timeout(self) -> float:
        waits = [TICK_S, self.backoff.next_due_in(), self.memory.next_due_in(), self.hooks.wakeup_in()]
        now = self.clock()
        waits += [c.stop_deadline - now for c in self.roster if c.stop_deadline is not None]
        return max(0.0, min(w for w in waits if w is not None))

    # Start and finish -----------------------------------------------------------------------
    def _start(self) -> None:
        self.selector.register(self.signal_pipe.fileno, selectors.EVENT_READ, None)
        s = self.settings
        log.info(
            "swarm_starting",
            count=s.count,
            preload=s.preload,
            phased_restart=s.phased_restart,
            adopting=len(self._handover.children) if self._handover else 0,
        )
        if self._handover is not None:
            self._adopt(self._handover)
            self._handover = None
            # The restart opens generation 1 before the vacant slots are forked: those run new code.
            if self.app_loaded:
                self._begin_restart()
            else:
                log.error(
                    "restart_failed",
                    reason="the app failed to import in the re-exec'd supervisor",
                    note="the running children keep the code they started with",
                )
        for slot in self.roster.vacant_slots():
            self._fork_or_retry(slot, "start")

    def _finish(self) -> None:
        self.requeuer.retry_due(force=True)
        if self.requeuer.pending:
            log.error(
                "requeue_pending_at_exit",
                identities=sorted(self.requeuer.pending),
                note="Redis unreachable: heartbeat orphan recovery in any live process requeues them",
            )
        log.info("swarm_stopped", exit_code=self.exit_code)
        self.selector.close()

    # Signals: the seams (arq's handle_sig); tests may call these directly ----------------------
    def _on_signals(self) -> None:
        for signum in self.signal_pipe.drain():
            action = ACTIONS.get(signum)
            if action is None or action == "reap":
                continue  # reaping happens on every turn
            log.info("signal_received", signal=signum.name, action=action)
            handlers: dict[str, Callable[[], None]] = {
                "stop": self.stop,
                "quiet": self.quiet,
                "restart": self.restart_children,
                "dump": self.dump,
            }
            handlers[action]()

    def stop(self, reason: str = "signal") -> None:
        if self.stopping:
            log.info("swarm_already_stopping")
            return
        self.stopping = True
        self.backoff.cancel_all()
        self.restart = None
        timeout = self.settings.graceful_stop_timeout_s
        log.info("swarm_stopping", reason=reason, children=len(self.roster), graceful_timeout_s=timeout)
        self._call_hook(self.hooks.stop_began, timeout)
        for child in self.roster:
            self._terminate(child)

    def quiet(self) -> None:
        """Stop fetching everywhere, now and in every child forked from now on."""
        self.quiet_slots = set(range(self.settings.count))
        log.info(
            "swarm_quiet", note="children finish running jobs and fetch no more; undo with remote resume"
        )
        for child in self.roster:
            self._quiet_child(child)

    def restart_children(self) -> None:
        if self.stopping:
            log.info("restart_ignored", reason="stopping")
            return
        if self.settings.preload:
            self._reexec()
        else:
            self._begin_restart()

    def dump(self) -> None:
        for child in self.roster:
            if child.handles_signals:
                self._send(child, signal.SIGTTIN)

    # Child pipes ----------------------------------------------------------------------------
    def _read(self, child: Child) -> None:
        while child.fd >= 0:
            try:
                data = os.read(child.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._close_pipe(child)
                return
            for item in child.lines.feed(data):
                if isinstance(item, Garbage):
                    child.last_heard = self.clock()
                    log.warning(
                        "child_sent_garbage", reason=item.reason, sample=item.sample, **child.describe()
                    )
                else:
                    self._on_message(child, item)

    def _close_pipe(self, child: Child) -> None:
        if child.fd < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(child.fd)
        os.close(child.fd)
        child.fd = -1

    def _on_message(self, child: Child, message: Message) -> None:
        was_quiet = child.quiet
        before = child.apply(message, self.clock())
        event = message.event
        if event == "booted" and before is Phase.FORKED:
            log.info("child_booted", **child.describe())
        elif event == "ready" and before is not Phase.READY and child.phase is Phase.READY:
            log.info("child_ready", uptime_s=round(child.uptime(self.clock()), 3), **child.describe())
            if child.slot in self.quiet_slots:
                self._quiet_child(child)
            if child.replaces is not None and not child.abandoned:
                self._promote(child)
            plan = self.restart
            if plan is not None and self.roster.is_current(child) and child.generation >= plan.generation:
                plan.slot_done(child.slot)
        elif event == "status":
            self._call_hook(self.hooks.child_status, child, child.status)
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
            self._read(child)  # its last lines (boot_error, stopped) are still in the pipe
            self._close_pipe(child)
            _, was_current = self.roster.pop(pid)
            self._on_exit(child, was_current, classify_exit(child, code))

    def _on_exit(self, child: Child, was_current: bool, outcome: ExitOutcome) -> None:
        now = self.clock()
        (log.info if outcome.clean else log.warning)(
            "child_exited",
            reason=outcome.reason,
            exit_code=outcome.code,
            signal=outcome.signal_name,
            uptime_s=round(child.uptime(now), 3),
            requeue=outcome.requeue,
            **child.describe(),
        )
        if outcome.requeue:
            self.requeuer.requeue(child.identity)  # before anything is respawned (DESIGN §4.3)
        self._call_hook(self.hooks.child_exited, child, outcome)
        if self.stopping:
            if not outcome.clean and self.exit_code == exitcodes.OK:
                self.exit_code = exitcodes.FAILURE
            return
        if child.replaces is not None or child.abandoned:
            self._replacement_failed(child, outcome)
            return
        if not was_current:
            return  # retired: its replacement already serves the slot
        replacement = self.roster.replacement_for(child.slot)
        if replacement is not None:
            self.roster.promote(replacement)  # it serves the slot from now on, ready or not yet
            self.backoff.started(child.slot, at=replacement.started_at)
            return
        if outcome.boot_error:
            log.error(
                "swarm_halting_boot_error",
                error=child.boot_error or f"child exited {outcome.code} (BOOT_ERROR)",
                note="the app (COGWORKER_REQUIRE) can't be imported: fix it and start the swarm again",
            )
            self.stop("boot_error")
            self.exit_code = exitcodes.BOOT_ERROR
            return
        self._respawn_reasons[child.slot] = outcome.reason
        if child.respawn_on_exit:
            self.backoff.schedule_now(child.slot)
            return
        crash = self.backoff.crashed(child.slot)
        log.warning(
            "respawn_scheduled",
            slot=child.slot,
            delay_s=crash.delay_s,
            streak=crash.streak,
            after=outcome.reason,
        )

    def _on_requeued(self, identity: str, moved: int, seconds: float) -> None:
        self._call_hook(self.hooks.jobs_requeued, identity, moved, seconds)

    def _respawn_due(self) -> None:
        if self.stopping:
            return
        for slot in self.backoff.due():
            if self.roster.current(slot) is None:
                reason = self._respawn_reasons.pop(slot, "respawn")
                if self._fork_or_retry(slot, "respawn") is not None:
                    self.replaced[reason] += 1
                    self._call_hook(self.hooks.child_replaced, slot, reason)

    # Restarts -------------------------------------------------------------------------------
    def _begin_restart(self) -> None:
        self.generation += 1
        phased = self.settings.phased_restart
        if self.restart is not None:
            log.info("restart_superseded", generation=self.restart.generation)
        self.restart = RestartPlan(self.generation, phased, pending=list(range(self.settings.count)))
        log.info("restart_began", phased=phased, generation=self.generation)
        self._call_hook(self.hooks.restart_began, phased)
        if phased:
            return
        for child in self.roster:
            if self.roster.is_current(child) and child.generation < self.generation and not child.stopping:
                self._retire(child, "restart", respawn=True)
            elif child.replaces is not None:
                self._abandon(child, "superseded by a restart of every child")

    def _advance_restart(self) -> None:
        plan = self.restart
        if plan is None or self.stopping:
            return
        slot = plan.next_slot(self.roster) if plan.phased else None
        old = self.roster.current(slot) if slot is not None else None
        if old is not None and self._fork_or_retry(old.slot, "restart", replaces=old) is None:
            self._end_restart(ok=False, reason="fork failed")
        elif plan.finished(self.roster):
            self._end_restart(ok=True)

    def _end_restart(self, *, ok: bool, reason: str = "") -> None:
        if self.restart is None:
            return
        (log.info if ok else log.error)(
            "restart_finished" if ok else "restart_failed",
            generation=self.restart.generation,
            **({"reason": reason, "note": "the remaining old children keep running"} if reason else {}),
        )
        self.restart = None
        self._call_hook(self.hooks.restart_ended, ok)

    def _promote(self, replacement: Child) -> None:
        old = self.roster.promote(replacement)
        self.backoff.started(replacement.slot, at=replacement.started_at)
        reason = replacement.purpose
        log.info("child_replaced", reason=reason, old_pid=old.pid if old else None, **replacement.describe())
        self.replaced[reason] += 1
        self._call_hook(self.hooks.child_replaced, replacement.slot, reason)
        if old is not None:
            self._retire(old, reason)

    def _replacement_failed(self, child: Child, outcome: ExitOutcome) -> None:
        if not child.abandoned:
            why = child.boot_error or f"replacement exited ({outcome.reason}, code {outcome.code})"
            self._replacement_gave_up(child, why)

    def _abandon(self, child: Child, why: str) -> None:
        child.abandoned = True
        self._terminate(child)
        self._replacement_gave_up(child, why)

    def _replacement_gave_up(self, child: Child, why: str) -> None:
        child.abandoned = True
        log.error(
            "replacement_failed",
            purpose=child.purpose,
            reason=why,
            old_pid=child.replaces,
            **child.describe(),
        )
        if child.purpose == "memory":
            self._memory_hold[child.slot] = self.clock() + self.settings.respawn_max_delay_s
        if self.restart is not None and self.restart.in_flight == child.slot:
            self._end_restart(ok=False, reason=why)

    def _reexec(self) -> None:
        handover = reexec.Handover(
            children=[self._adoptable(c) for c in self.roster if c.fd >= 0],
            quiet_slots=sorted(self.quiet_slots),
            pending_requeues=sorted(self.requeuer.pending),
        )
        log.info("swarm_reexec", children=len(handover.children), note="loading the code on disk now")
        try:
            reexec.exec_self(handover, self.argv)
        except OSError as exc:
            log.error("restart_failed", reason=f"re-exec failed: {exc}", note="the old children keep running")

    # Deadlines: stragglers, hung children, replacements, memory ----------------------------------
    def _kill_stragglers(self) -> None:
        now = self.clock()
        for child in self.roster:
            if child.kill_reason is None and child.stop_deadline is not None and now >= child.stop_deadline:
                log.warning(
                    "straggler_killed", after_s=self.settings.graceful_stop_timeout_s, **child.describe()
                )
                self._kill(child, "straggler")
            elif child.ready_deadline is not None and now >= child.ready_deadline and not child.abandoned:
                self._abandon(child, f"not ready within {self.settings.restart_ready_timeout_s}s")

    def _check_liveness(self) -> None:
        now, limit = self.clock(), self.settings.liveness_timeout_s
        for child in self.roster:
            if child.kill_reason is None and not child.stopping and child.silent_for(now) > limit:
                silent = round(child.silent_for(now), 2)
                log.error("child_hung", silent_s=silent, phase=child.phase.value, **child.describe())
                self._kill(child, "hung")

    def _watch_memory(self) -> None:
        if self.stopping or not self.memory.due():
            return
        now = self.clock()
        watched = [
            c
            for c in self.roster.currents()
            if c.phase is Phase.READY
            and c.retire_reason is None
            and self.roster.replacement_for(c.slot) is None
            and now >= self._memory_hold.get(c.slot, 0.0)
        ]
        for pid, rss in self.memory.over_limit(c.pid for c in watched):
            child = self.roster.get(pid)
            if child is not None:
                log.warning(
                    "child_over_memory_limit",
                    rss_mb=round(rss / MB, 1),
                    limit_mb=self.memory.limit_mb,
                    **child.describe(),
                )
                self._fork_or_retry(child.slot, "memory", replaces=child)

    # Acting on children ---------------------------------------------------------------------
    def _fork_or_retry(self, slot: int, purpose: str, *, replaces: Child | None = None) -> Child | None:
        quiet = slot in self.quiet_slots
        try:
            spawned = spawn(
                self.settings,
                slot,
                app_loaded=self.app_loaded,
                quiet=quiet,
                close_in_child=self._close_in_child,
            )
        except OSError as exc:
            if replaces is None:
                delay = self.backoff.fork_failed(slot)
                log.error("fork_failed", slot=slot, error=str(exc), retry_in_s=delay)
            else:
                log.error("fork_failed", slot=slot, error=str(exc), purpose=purpose)
            return None
        now = self.clock()
        child = Child(
            spawned.pid,
            slot,
            spawned.identity,
            spawned.fd,
            started_at=now,
            last_heard=now,
            generation=self.generation,
            purpose=purpose,
            quiet_requested=quiet,
        )
        if replaces is not None:
            child.replaces = replaces.pid
            child.ready_deadline = now + self.settings.restart_ready_timeout_s
        else:
            self.backoff.started(slot)
        self.roster.add(child, current=replaces is None)
        self.selector.register(child.fd, selectors.EVENT_READ, child)
        log.info("child_started", purpose=purpose, replaces=child.replaces, **child.describe())
        self._call_hook(self.hooks.child_started, child)
        return child

    def _close_in_child(self) -> None:
        """Runs in a new child: drop what belongs to the supervisor."""
        self.signal_pipe.close()
        self.selector.close()
        for child in self.roster:
            if child.fd >= 0:
                os.close(child.fd)
        self.hooks.in_child()

    def _quiet_child(self, child: Child) -> None:
        # Before `ready` a launcher drops a quiet command; ready children get USR1 now, the others
        # when they report ready. Children forked from now on start quiet (spawn's quiet=).
        if child.phase is Phase.READY and not child.quiet_requested:
            self._send(child, signal.SIGUSR1)
            child.quiet_requested = True

    def _retire(self, child: Child, reason: str, *, respawn: bool = False) -> None:
        child.retire_reason = reason
        child.respawn_on_exit = respawn
        self._terminate(child)

    def _terminate(self, child: Child) -> None:
        if child.term_sent_at is not None:
            return
        now = self.clock()
        self._send(child, signal.SIGTERM)
        child.term_sent_at = now
        deadline = now + self.settings.graceful_stop_timeout_s
        child.stop_deadline = min(child.stop_deadline or deadline, deadline)

    def _kill(self, child: Child, reason: str) -> None:
        child.kill_reason = reason
        self._send(child, signal.SIGKILL)

    @staticmethod
    def _send(child: Child, signum: signal.Signals) -> None:
        # The pid can't have been reused: an unreaped child keeps it, even as a zombie.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    # Hand-over after a re-exec ----------------------------------------------------------------
    def _adoptable(self, child: Child) -> reexec.AdoptedChild:
        os.set_blocking(child.fd, False)
        return reexec.AdoptedChild(
            pid=child.pid,
            slot=child.slot,
            identity=child.identity,
            fd=child.fd,
            started_at=child.started_at,
            last_heard=child.last_heard,
            phase=child.phase.value,
            current=self.roster.is_current(child),
            term_sent_at=child.term_sent_at,
            stop_deadline=child.stop_deadline,
            retire_reason=child.retire_reason,
            quiet_requested=child.quiet_requested,
            status=child.status,
            pending=child.lines.pending.decode("latin-1"),
        )

    def _adopt(self, handover: reexec.Handover) -> None:
        now = self.clock()
        self.quiet_slots = set(handover.quiet_slots)
        self.requeuer.pending.update(handover.pending_requeues)
        for a in handover.children:
            child = Child(
                a.pid,
                a.slot,
                a.identity,
                a.fd,
                started_at=a.started_at,
                last_heard=now,  # the exec took a while: a full liveness period from now
                purpose="adopted",
                phase=Phase(a.phase),
                lines=LineBuffer(a.pending.encode("latin-1")),
                status=a.status,
                term_sent_at=a.term_sent_at,
                stop_deadline=a.stop_deadline,
                retire_reason=a.retire_reason,
                quiet_requested=a.quiet_requested,
            )
            self.roster.add(child, current=a.current)
            self.selector.register(child.fd, selectors.EVENT_READ, child)
            if a.current:
                self.backoff.started(a.slot, at=a.started_at)
            elif child.term_sent_at is None:
                # A replacement the old image was waiting for: the new restart replaces every slot.
                self._abandon(child, "superseded by the re-exec")
            log.info("child_adopted", phase=child.phase.value, current=a.current, **child.describe())
            self._call_hook(self.hooks.child_started, child)

    # Publishing -----------------------------------------------------------------------------
    def view(self) -> SwarmView:
        statuses = [c.status for c in self.roster]
        now = self.clock()
        deadlines = [c.stop_deadline - now for c in self.roster if c.stop_deadline is not None]
        return SwarmView(
            count=self.settings.count,
            children=len(self.roster),
            ready=self.roster.ready,
            busy=_total(statuses, "busy"),
            threads=_total(statuses, "threads"),
            processed=_total(statuses, "processed"),
            failed=_total(statuses, "failed"),
            redis_down=sum(1 for s in statuses if s.get("redis") == "down"),
            quiet=bool(self.quiet_slots),
            restarting=self.restart is not None,
            stopping=self.stopping,
            stop_deadline_in_s=max(0.0, min(deadlines)) if self.stopping and deadlines else None,
        )

    def latest_status(self) -> dict[int, dict[str, Any]]:
        """pid -> the child's latest status line (for metrics)."""
        return {c.pid: dict(c.status) for c in self.roster}

    def _publish(self) -> None:
        view = self.view()
        last = self._last_view
        if last is None or (view.children, view.ready, view.state) != (last.children, last.ready, last.state):
            log.info(
                "swarm_capacity", children=view.children, ready=view.ready, count=view.count, state=view.state
            )
            setproctitle(f"cogworker-swarm [{view.children} children, {view.ready} ready] {view.state}")
        if view != last:
            self._call_hook(self.hooks.state_changed, view)
        self._last_view = view
        self._call_hook(self.hooks.tick, view)

    @staticmethod
    def _call_hook(hook: Callable[..., None], *args: Any) -> None:
        try:
            hook(*args)
        except Exception:
            log.exception("hook_failed", hook=getattr(hook, "__qualname__", repr(hook)))


def _total(statuses: list[dict[str, Any]], key: str) -> int:
    return sum(int(s.get(key) or 0) for s in statuses if isinstance(s.get(key), int | float))
