"""The swarm: one thread, one loop. Wait for an event, dispatch it, reconcile.

Events are signals (through the self-pipe, signals.py), lines from children's state pipes
(protocol.py) and answers from the fork server (forkserver_keeper.py). Reconciling is where things
happen: reap exited children (requeueing the jobs of any that died abnormally before its slot is
respawned), respawn slots whose backoff has run out, advance a restart, kill stragglers and hung
children, watch memory, then tell the hooks (systemd notify, metrics) what the swarm looks like now.
This module decides; processes.py tracks and signals children, forkserver_keeper.py asks fork
servers for them.

The loop never waits on another process (DESIGN §5): a spawn is a request, and the child is tracked
when the fork server's answer comes (`spawned`). A fork server that stops answering is replaced by
the keeper. A restart (HUP/USR2) first starts a new fork server, which imports the code on disk now
(the app too, with preload); once it is ready, the old one retires and the children are replaced
from the new one.
"""

from __future__ import annotations

import os
import selectors
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes
from supervisor.child import Child, ExitOutcome, Phase, classify_exit
from supervisor.child_processes import ChildProcesses
from supervisor.config import SwarmConfig
from supervisor.forkserver_handle import ForkServerHandle
from supervisor.forkserver_keeper import ForkServerKeeper, SpawnRequest
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks, SwarmView
from supervisor.memory_watch import MB, MemoryWatch
from supervisor.replacements import Replacements
from supervisor.requeue_requests import RequeueRequests
from supervisor.respawn_backoff import RespawnBackoff
from supervisor.roster import Roster
from supervisor.signals import ACTIONS, SignalPipe
from supervisor.wire.child_lines import Garbage, Message

log = structlog.get_logger("cogworker.swarm")

TICK_S = 0.5  # the loop wakes at least this often: liveness, fork server and replacement deadlines
FINISH_WAIT_S = 10.0  # at exit: for requeue answers, then for fork servers to exit


class Swarm:
    def __init__(
        self,
        settings: SwarmConfig,
        signal_pipe: SignalPipe,
        forkserver: ForkServerHandle,
        *,
        hooks: SwarmHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.signal_pipe = signal_pipe
        self.hooks = hooks or SwarmHooks()
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.roster = Roster(settings.count)
        self.procs = ChildProcesses(settings, self.roster, self.selector, clock)
        self.backoff = RespawnBackoff(
            clock,
            healthy_uptime_s=settings.healthy_uptime_s,
            base_delay_s=settings.respawn_base_delay_s,
            max_delay_s=settings.respawn_max_delay_s,
        )
        self.keeper = ForkServerKeeper(
            forkserver,
            self.selector,
            RequeueRequests(clock, on_done=self._on_requeued),
            self,
            # A requeue may wait on Redis; beyond that, a fork server is held to a child's liveness.
            answer_timeout_s=settings.liveness_timeout_s + settings.redis_timeout_s,
            boot_timeout_s=settings.boot_timeout_s,
            clock=clock,
        )
        self.memory = MemoryWatch(settings.maxmem_mb, settings.memory_check_interval_s, clock)
        self.replacements = Replacements(
            settings,
            self.roster,
            self.procs,
            self.backoff,
            self.hooks,
            fork=lambda slot, purpose, old: self._fork(slot, purpose, replaces=old),
            spawning=lambda slot: self.keeper.spawning(slot) is not None,
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
        while not (self.stopping and len(self.roster) == 0 and not self.keeper.requests):
            try:
                for key, _ in self.selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals()
                    elif isinstance(key.data, Child):
                        self._on_readable(key.data)
                    else:
                        self.keeper.on_readable(key.data)  # a fork server's answers
                self._reconcile()
            except Exception:
                self._on_loop_error()
        self._finish()
        return self.exit_code

    def _reconcile(self) -> None:
        self._reap()
        self.keeper.tick()  # requeue retries; a hung fork server replaced, a dead one started again
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
        waits = [TICK_S, self.memory.next_due_in(), hook_wait, self.keeper.next_due_in()]
        if self.keeper.ready:  # else respawns wait for a fork server's `ready`, which wakes the loop
            waits.append(self.backoff.next_due_in())
        now = self.clock()
        # (A child already SIGKILLed keeps its passed deadline; it must not spin the loop until reaped.)
        waits += [
            c.stop_deadline - now for c in self.roster if c.stop_deadline is not None and not c.kill_reason
        ]
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
            forkserver_pid=self.keeper.current.pid if self.keeper.current else None,
        )
        for slot in self.roster.vacant_slots():
            self._fork(slot, "start")

    def _finish(self) -> None:
        keeper = self.keeper
        keeper.send_requeues()
        self._wait_for_forkservers(keeper.requeues_settled)
        keeper.retire_all()
        self._wait_for_forkservers(lambda: not keeper.servers())
        keeper.kill_all()
        self._wait_for_forkservers(lambda: not keeper.servers())
        keeper.close()
        if keeper.requeuer.pending:
            log.error(
                "requeue_pending_at_exit",
                identities=sorted(keeper.requeuer.pending),
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
        self.keeper.stopping = True
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
        if self.keeper.loading is not None:
            log.info("restart_ignored", reason="a restart is already loading the code")
            return
        hook_calls.call(self.hooks.restart_began, self.settings.phased_restart)
        try:
            server = self.keeper.load_new()
        except OSError as exc:
            self.restart_failed(f"can't start a fork server: {exc}")
            return
        log.info(
            "restart_loading",
            forkserver_pid=server.pid,
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
            if self.keeper.reaped(pid, code):
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
            self.keeper.requeue(child.identity)
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
        elif (request := self.keeper.spawning(child.slot)) is not None:
            request.replaces = None  # its replacement, asked for and not forked yet, takes the slot
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
        if self.stopping or not self.keeper.ready:
            return  # due slots stay due until a fork server is ready
        for slot in self.backoff.due():
            if self.roster.current(slot) is None and self.keeper.spawning(slot) is None:
                self._fork(slot, "respawn")

    def _count_replaced(self, slot: int, reason: str) -> None:
        self.replaced[reason] += 1
        hook_calls.call(self.hooks.child_replaced, slot, reason)

    def _fork(self, slot: int, purpose: str, *, replaces: Child | None = None) -> bool:
        """Ask for a child for `slot`; it is tracked when the fork server answers (`spawned`)."""
        try:
            self.keeper.spawn(
                slot,
                purpose,
                quiet=slot in self.quiet_slots,
                generation=self.replacements.generation,
                replaces=replaces,
            )
        except OSError as exc:
            retry = self.backoff.fork_failed(slot) if replaces is None else None
            log.error("fork_failed", slot=slot, purpose=purpose, error=str(exc), retry_in_s=retry)
            return False
        return True

    # The fork server's answers (forkserver_keeper.KeeperOwner) ---------------------------------
    def spawned(self, request: SpawnRequest, pid: int) -> None:
        old = request.replaces
        if old is not None and not self.roster.is_current(old):
            old = None  # it exited while its replacement was being forked: that takes the slot
        surplus = old is None and self.roster.current(request.slot) is not None
        takes_slot = old is None and not surplus
        child = self.procs.adopt(request, pid, replaces=old, current=takes_slot)
        if takes_slot:
            self.backoff.started(request.slot, at=child.started_at)
            if request.purpose == "respawn":
                self._count_replaced(request.slot, self._respawn_reasons.pop(request.slot, "respawn"))
        hook_calls.call(self.hooks.child_started, child)
        if self.stopping or surplus:
            self.procs.terminate(child)

    def spawn_failed(self, request: SpawnRequest, error: str, *, server_lost: bool) -> None:
        slot, purpose = request.slot, request.purpose
        if purpose in ("restart", "memory"):
            self.replacements.spawn_failed(slot, purpose, error)
        if self.stopping or self.roster.current(slot) is not None or self.keeper.spawning(slot):
            log.error("fork_failed", slot=slot, purpose=purpose, error=error)
            return
        # A lost fork server is no crash of the slot: it is forked as soon as a new one is ready.
        retry = None if server_lost else self.backoff.fork_failed(slot)
        if server_lost:
            self.backoff.schedule_now(slot)
        log.error("fork_failed", slot=slot, purpose=purpose, error=error, retry_in_s=retry)

    def forkserver_ready(self, *, restarted: bool) -> None:
        if restarted and not self.stopping:
            self.replacements.begin_restart(announced=True)

    def restart_failed(self, reason: str) -> None:
        log.error("restart_failed", reason=reason, note="the old children keep running")
        hook_calls.call(self.hooks.restart_ended, False)

    def _wait_for_forkservers(self, done: Callable[[], bool]) -> None:
        """At exit, with no children left: read answers and reap fork servers until `done`."""
        deadline = self.clock() + FINISH_WAIT_S
        while not done() and self.clock() < deadline:
            for key, _ in self.selector.select(min(TICK_S, max(0.0, deadline - self.clock()))):
                if key.data is None:
                    self.signal_pipe.drain()  # stopping already; a second TERM changes nothing
                elif not isinstance(key.data, Child):
                    self.keeper.on_readable(key.data)
            self._reap()
            self.keeper.tick()  # a hung fork server is still replaced, for the requeues

    # Deadlines and memory -------------------------------------------------------------------
    def _enforce_deadlines(self) -> None:
        now, s = self.clock(), self.settings
        for child in self.roster:
            if child.kill_reason is not None:
                continue
            if child.stop_deadline is not None and now >= child.stop_deadline:
                log.warning("straggler_killed", after_s=s.graceful_stop_timeout_s, **child.describe())
                self.procs.kill(child, "straggler")
            elif child.stopping:
                continue
            elif child.phase is Phase.FORKED:
                # Not a word yet: it is importing the app (without preload, each child imports it
                # itself, and a big app takes longer than a hang would). The liveness timer starts
                # with its first line; until then only the generous boot deadline applies.
                if child.uptime(now) > s.boot_timeout_s:
                    log.error("child_boot_timeout", after_s=round(child.uptime(now), 2), **child.describe())
                    self.procs.kill(child, "boot_timeout")
            elif child.silent_for(now) > s.liveness_timeout_s:
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
            restarting=self.replacements.restarting or self.keeper.loading is not None,
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
