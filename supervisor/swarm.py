"""The swarm: one thread, one loop. Wait for an event, dispatch it, reconcile.

Events are signals (through the self-pipe, signals.py), lines from children's state pipes
(protocol.py) and answers from the fork server (forkserver.py). Reconciling is where things happen:
reap exited children (requeueing the jobs of any that died abnormally before its slot is respawned),
respawn slots whose backoff has run out, advance a restart, kill stragglers and hung children, watch
memory, then tell the hooks (systemd notify, metrics) what the swarm looks like now. This module
decides; processes.py has children forked and signals them.

A restart (HUP/USR2) first starts a new fork server, which imports the code on disk now (the app
too, with preload); once it is ready, the old one retires and the children are replaced from the new
one. A fork server that dies is started again, with a growing delay while it keeps failing.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes
from supervisor import hooks as hook_calls
from supervisor.backoff import RespawnBackoff
from supervisor.child import Child, ExitOutcome, Phase, classify_exit
from supervisor.config import SwarmConfig
from supervisor.forkserver import ForkServer, Spawned
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
FORKSERVER_RETRY_FIRST_S = 1.0
FORKSERVER_RETRY_MAX_S = 60.0
FINISH_WAIT_S = 10.0  # at exit: for requeue answers, then for fork servers to exit


class Swarm:
    def __init__(
        self,
        settings: SwarmConfig,
        signal_pipe: SignalPipe,
        forkserver: ForkServer,
        *,
        hooks: SwarmHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.signal_pipe = signal_pipe
        self.forkserver = forkserver  # the one children are forked from (ready, or being replaced)
        self.loading: ForkServer | None = None  # a restart's new fork server, still importing
        self.retired: list[ForkServer] = []  # old ones finishing their last answers
        self._forkserver_retry_at: float | None = None  # when to start one again after it died
        self._forkserver_retry_delay = FORKSERVER_RETRY_FIRST_S
        self.hooks = hooks or SwarmHooks()
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.roster = Roster(settings.count)
        self.procs = ChildProcesses(settings, self.roster, self.selector, self._spawn, clock)
        self.backoff = RespawnBackoff(
            clock,
            healthy_uptime_s=settings.healthy_uptime_s,
            base_delay_s=settings.respawn_base_delay_s,
            max_delay_s=settings.respawn_max_delay_s,
        )
        self.requeuer = Requeuer(clock, on_done=self._on_requeued)
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
                    elif isinstance(key.data, ForkServer):
                        self._on_forkserver(key.data)
                    else:
                        self._on_readable(key.data)
                self._reconcile()
            except Exception:
                self._on_loop_error()
        self._finish()
        return self.exit_code

    def _reconcile(self) -> None:
        self._reap()
        for server in self._forkservers():
            if server.has_backlog:  # answers read while a spawn waited for its own
                self._on_forkserver(server)
        self._restart_forkserver_due()
        self.requeuer.retry_due(self._send_requeue)
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
        if self._forkserver_retry_at is not None:
            waits.append(self._forkserver_retry_at - now)
        # (A child already SIGKILLed keeps its passed deadline; it must not spin the loop until reaped.)
        waits += [
            c.stop_deadline - now for c in self.roster if c.stop_deadline is not None and not c.kill_reason
        ]
        return max(0.0, min(w for w in waits if w is not None))

    # Start and finish -----------------------------------------------------------------------
    def _start(self) -> None:
        self.selector.register(self.signal_pipe.fileno, selectors.EVENT_READ, None)
        self._listen(self.forkserver)
        s = self.settings
        log.info(
            "swarm_starting",
            count=s.count,
            preload=s.preload,
            phased_restart=s.phased_restart,
            forkserver_pid=self.forkserver.pid,
        )
        for slot in self.roster.vacant_slots():
            self._fork(slot, "start")

    def _finish(self) -> None:
        self.requeuer.retry_due(self._send_requeue, force=True)
        self._wait_for_forkservers(lambda: not self.requeuer.in_flight)
        for server in self._forkservers():
            server.retire()
        self._wait_for_forkservers(lambda: not self._forkservers())
        for server in self._forkservers():
            log.warning("forkserver_killed", forkserver_pid=server.pid, note="it did not exit when told to")
            server.kill()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(server.pid, 0)
            self._drop_forkserver(server)
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
        """Load the code on disk now in a new fork server, then replace every child from it."""
        if self.stopping:
            log.info("restart_ignored", reason="stopping")
            return
        if self.loading is not None:
            log.info("restart_ignored", reason="a restart is already loading the code")
            return
        hook_calls.call(self.hooks.restart_began, self.settings.phased_restart)
        try:
            self.loading = self._start_forkserver()
        except OSError as exc:
            log.error(
                "restart_failed",
                reason=f"can't start a fork server: {exc}",
                note="the old children keep running",
            )
            hook_calls.call(self.hooks.restart_ended, False)
            return
        log.info(
            "restart_loading",
            forkserver_pid=self.loading.pid,
            note="a new fork server imports the code on disk now",
        )

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
            server = next((f for f in self._forkservers() if f.pid == pid), None)
            if server is not None:
                self._on_forkserver_exit(server, code)
                continue
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
            # Sent before anything is respawned (DESIGN §4.3): the fork server answers in order.
            self.requeuer.requeue(child.identity, self._send_requeue)
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

    # The fork servers ----------------------------------------------------------------------
    def _forkservers(self) -> list[ForkServer]:
        """Every fork server process still to be reaped."""
        servers = [self.forkserver, *([self.loading] if self.loading else []), *self.retired]
        return [s for s in servers if s.pid > 0]

    def _start_forkserver(self) -> ForkServer:
        server = ForkServer(max(s.generation for s in [self.forkserver, *self.retired]) + 1)
        server.start()
        self._listen(server)
        return server

    def _listen(self, server: ForkServer) -> None:
        self.selector.register(server.fileno(), selectors.EVENT_READ, server)

    def _unlisten(self, server: ForkServer) -> None:
        if server.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(server.fileno())
            server.close()

    def _drop_forkserver(self, server: ForkServer) -> None:
        """Reaped: stop listening, and forget it unless it is the current one (its pid becomes 0)."""
        self._unlisten(server)
        server.pid = 0
        if server in self.retired:
            self.retired.remove(server)
        if server is self.loading:
            self.loading = None

    def _spawn(self, slot: int, nonce: str, quiet: bool) -> Spawned:
        return self.forkserver.spawn(slot, nonce, quiet=quiet)

    def _send_requeue(self, identity: str) -> bool:
        return self.forkserver.requeue(identity)

    def _on_forkserver(self, server: ForkServer) -> None:
        for message in server.read():
            op = message.get("op")
            if op == "ready":
                self._on_forkserver_ready(server)
            elif op == "requeued":
                self.requeuer.on_answer(message)
            elif op == "spawned":
                # An answer that came after its spawn had timed out: nobody tracks that worker, and
                # its state pipe is closed. Stop it (it holds no job yet, or requeues its own).
                log.warning("late_spawn_stopped", child_pid=message.get("pid"), slot=message.get("slot"))
                with contextlib.suppress(ProcessLookupError, TypeError, ValueError):
                    os.kill(int(message["pid"]), signal.SIGTERM)
            else:
                log.warning("forkserver_said", message=message)
        if server.gone:
            self._unlisten(server)

    def _on_forkserver_ready(self, server: ForkServer) -> None:
        log.info("forkserver_ready", forkserver_pid=server.pid, generation=server.generation)
        self._forkserver_retry_delay = FORKSERVER_RETRY_FIRST_S
        restart = server is self.loading  # else one started after the current one died
        if restart:
            old, self.forkserver, self.loading = self.forkserver, server, None
            if old.pid > 0:
                old.retire()
                self.retired.append(old)
        self.requeuer.retry_due(self._send_requeue, force=True)
        if restart and not self.stopping:
            self.replacements.begin_restart(announced=True)

    def _on_forkserver_exit(self, server: ForkServer, code: int) -> None:
        pid = server.pid
        self._on_forkserver(server)  # its last answers are still in the socket
        self._drop_forkserver(server)
        if server.retiring:
            log.info("forkserver_retired", forkserver_pid=pid, exit_code=code)
            return
        if server is not self.forkserver:  # a restart's new one, dead before it was ready
            log.error(
                "restart_failed",
                reason=f"the new fork server exited {code} before it was ready (see its error above)",
                note="the old children keep running",
            )
            hook_calls.call(self.hooks.restart_ended, False)
            if self.forkserver.pid == 0 and not self.stopping:
                self._schedule_forkserver_start()  # the old one had died meanwhile
            return
        self.requeuer.lost()
        log.error(
            "forkserver_exited",
            forkserver_pid=pid,
            exit_code=code,
            note="running children go on; no child can be forked until a new fork server is ready",
        )
        if not self.stopping and self.loading is None:  # else a restart's new one takes over
            self._schedule_forkserver_start()

    def _schedule_forkserver_start(self) -> None:
        delay = self._forkserver_retry_delay
        self._forkserver_retry_delay = min(delay * 2, FORKSERVER_RETRY_MAX_S)
        self._forkserver_retry_at = self.clock() + delay
        log.info("forkserver_start_scheduled", in_s=delay)

    def _restart_forkserver_due(self) -> None:
        at = self._forkserver_retry_at
        if at is None or self.clock() < at or self.stopping:
            return
        self._forkserver_retry_at = None
        try:
            server = self._start_forkserver()
        except OSError as exc:
            self._forkserver_retry_at = self.clock() + self._forkserver_retry_delay
            log.error("forkserver_start_failed", error=str(exc))
            return
        self.forkserver = server

    def _wait_for_forkservers(self, done: Callable[[], bool]) -> None:
        """At exit, with no children left: read answers and reap fork servers until `done`."""
        deadline = self.clock() + FINISH_WAIT_S
        while not done() and self.clock() < deadline:
            for key, _ in self.selector.select(min(TICK_S, max(0.0, deadline - self.clock()))):
                if key.data is None:
                    self.signal_pipe.drain()  # stopping already; a second TERM changes nothing
                elif isinstance(key.data, ForkServer):
                    self._on_forkserver(key.data)
            self._reap()

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
            restarting=self.replacements.restarting or self.loading is not None,
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
