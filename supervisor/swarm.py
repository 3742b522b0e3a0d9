"""The swarm: one thread, one loop. Wait for an event, dispatch it, reconcile.

Events are signals (through the self-pipe, signals.py), lines from children's state pipes
(wire/child_lines.py, read by children/messages.py) and the spawner's answers (children/spawner.py).
Reconciling is where things happen: reap exited children (children/reaper.py, which asks for the jobs of any
that died abnormally before its slot is respawned), respawn slots whose backoff has run out, advance
a restart, kill stragglers and hung children (children/deadlines.py), watch memory, then tell the hooks
(systemd notify, metrics) what the swarm looks like now. This module decides; children/processes.py
tracks and signals children, the spawner (forkserver_client/keeper.py) asks fork servers for them.

The loop never waits on another process, so that a slow fork server or Redis never delays reaping,
signal relaying or the systemd watchdog: a spawn is a request, and the child is tracked when the
answer comes (`spawned`). A restart (HUP/USR2) first has new code loaded (a new fork server imports
it, the app too with preload); once it is ready, the children are replaced from it.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable

import structlog

from cogworker import exitcodes
from supervisor.children.child import Child, ExitOutcome
from supervisor.children.deadlines import overdue
from supervisor.children.messages import ChildMessages
from supervisor.children.processes import ChildProcesses
from supervisor.children.reaper import Reaper
from supervisor.children.replacements import Replacements
from supervisor.children.roster import Roster
from supervisor.children.spawner import MakeSpawner, SpawnRequest
from supervisor.config import SwarmConfig
from supervisor.integrations import hooks as hook_calls
from supervisor.integrations.hooks import SwarmHooks, SwarmView
from supervisor.publishing import Publisher
from supervisor.restart_policy.backoff import RespawnBackoff
from supervisor.restart_policy.memory_watch import MB, MemoryWatch
from supervisor.restart_policy.respawns import Respawns
from supervisor.signals import ACTIONS, SignalPipe
from supervisor.system import DEFAULT_SYSTEM, System

log = structlog.get_logger("cogworker.swarm")

TICK_S = 0.5  # the loop wakes at least this often: liveness, fork server and replacement deadlines
FINISH_WAIT_S = 10.0  # at exit: for requeue answers, then for fork servers to exit


class Swarm:
    def __init__(
        self,
        settings: SwarmConfig,
        signal_pipe: SignalPipe,
        make_spawner: MakeSpawner,
        *,
        hooks: SwarmHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
        system: System = DEFAULT_SYSTEM,
    ) -> None:
        """`make_spawner` (forkserver_client.keeper.keeper_for in production), `clock` and `system` are the
        seams tests run the swarm in process through."""
        self.settings = settings
        self.signal_pipe = signal_pipe
        self.hooks = hooks or SwarmHooks()
        self.clock = clock
        self.system = system
        self.selector = selectors.DefaultSelector()
        self.roster = Roster(settings.count)
        self.procs = ChildProcesses(settings, self.roster, self.selector, clock, system.send_signal)
        self.backoff = RespawnBackoff(
            clock,
            healthy_uptime_s=settings.healthy_uptime_s,
            base_delay_s=settings.respawn_base_delay_s,
            max_delay_s=settings.respawn_max_delay_s,
        )
        self.spawner = make_spawner(self.selector, self, clock)
        self.memory = MemoryWatch(settings.maxmem_mb, settings.memory_check_interval_s, clock)
        self.replacements = Replacements(
            settings,
            self.roster,
            self.procs,
            self.backoff,
            self.hooks,
            fork=lambda slot, purpose, old: self.respawns.fork(slot, purpose, replaces=old),
            spawning=lambda slot: self.spawner.spawning(slot) is not None,
            on_replaced=lambda slot, reason: self.respawns.count_replaced(slot, reason),
            clock=clock,
        )
        self.quiet_slots: set[int] = set()
        self.respawns = Respawns(
            self.roster,
            self.procs,
            self.backoff,
            self.spawner,
            self.hooks,
            quiet_slots=self.quiet_slots,
            generation=lambda: self.replacements.generation,
        )
        self.messages = ChildMessages(
            settings, self.procs, self.replacements, self.hooks, quiet_slots=self.quiet_slots, clock=clock
        )
        self.reaper = Reaper(system, self.roster, self.procs, self.messages, self.spawner, self.hooks, clock)
        self.stopping = False
        self.exit_code = exitcodes.OK
        self.publisher = Publisher(self.hooks, system.set_title)

    # The loop -------------------------------------------------------------------------------
    def run(self) -> int:
        self.start()
        while not self.done:
            self.turn(self._timeout())
        self.finish()
        return self.exit_code

    @property
    def done(self) -> bool:
        """Stopping, no child left, and none asked for that may still come."""
        return self.stopping and len(self.roster) == 0 and not self.spawner.awaiting_spawns

    def turn(self, timeout: float) -> None:
        """One loop turn: wait up to `timeout` for events, dispatch them, reconcile."""
        try:
            for key, _ in self.selector.select(timeout):
                if key.data is None:
                    self._on_signals()
                elif isinstance(key.data, Child):
                    self.messages.read(key.data)
                else:
                    self.spawner.on_readable(key.data)  # a fork server's answers
            self._reconcile()
        except Exception:
            self._on_loop_error()

    def _reconcile(self) -> None:
        self._reap()
        self.spawner.tick()  # requeue retries; a hung fork server replaced, a dead one started again
        self.respawns.respawn_due()
        if not self.stopping:
            self.replacements.advance()
            self.replacements.replace_stuck()
        self._enforce_deadlines()
        self._watch_memory()
        self.publisher.publish(self.view())

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
        waits = [TICK_S, self.memory.next_due_in(), hook_wait, self.spawner.next_due_in()]
        if self.spawner.ready:  # else respawns wait for a fork server's `ready`, which wakes the loop
            waits.append(self.backoff.next_due_in())
        now = self.clock()
        # (A child already SIGKILLed keeps its passed deadline; it must not spin the loop until reaped.)
        waits += [
            c.stop_deadline - now for c in self.roster if c.stop_deadline is not None and not c.kill_reason
        ]
        return max(0.0, min(w for w in waits if w is not None))

    # Start and finish -----------------------------------------------------------------------
    def start(self) -> None:
        self.selector.register(self.signal_pipe.fileno, selectors.EVENT_READ, None)
        s = self.settings
        log.info(
            "swarm_starting",
            count=s.count,
            preload=s.preload,
            phased_restart=s.phased_restart,
            forkserver_pid=self.spawner.current_pid,
        )
        for slot in self.roster.vacant_slots():
            self.respawns.fork(slot, "start")

    def finish(self) -> None:
        """At exit, with no children left: the requeues still owed, then the fork servers' exit."""
        for step, done in self.spawner.exit_steps():
            step()
            self._wait_for_forkservers(done)
        stranded = self.spawner.close()
        if stranded:
            log.error(
                "requeue_pending_at_exit",
                identities=sorted(stranded),
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
        self.stopping = self.respawns.stopping = True
        self.spawner.begin_stop()
        self.backoff.cancel_all()
        self.replacements.cancel()
        timeout = self.settings.graceful_stop_timeout_s
        log.info("swarm_stopping", reason=reason, children=len(self.roster), graceful_timeout_s=timeout)
        hook_calls.call(self.hooks.stop_began, timeout)
        for child in self.roster:
            self.procs.terminate(child)

    def quiet(self) -> None:
        """Stop fetching everywhere, now and in every child forked from now on."""
        self.quiet_slots.update(range(self.settings.count))
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
        if self.spawner.restart_loading:
            log.info("restart_ignored", reason="a restart is already loading the code")
            return
        hook_calls.call(self.hooks.restart_began, self.settings.phased_restart)
        try:
            self.spawner.load_new_code()
        except OSError as exc:
            self.restart_failed(f"can't start a fork server: {exc}")

    # Exits ----------------------------------------------------------------------------------
    def _reap(self) -> None:
        for child, was_current, outcome in self.reaper.reap():
            self._on_exit(child, was_current, outcome)

    def _on_exit(self, child: Child, was_current: bool, outcome: ExitOutcome) -> None:
        """What a reaped child's exit means for its slot (its jobs were asked back: children/reaper.py)."""
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
        elif (request := self.spawner.spawning(child.slot)) is not None:
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
            self.respawns.schedule(child, outcome)

    # The spawner's answers (spawner.SpawnerOwner) -----------------------------------------------
    def spawned(self, request: SpawnRequest, pid: int) -> None:
        self.respawns.spawned(request, pid)

    def spawn_failed(self, request: SpawnRequest, error: str, *, server_lost: bool) -> None:
        if request.purpose in ("restart", "memory", "stuck"):
            self.replacements.spawn_failed(request.slot, request.purpose, error)
        self.respawns.spawn_failed(request, error, server_lost=server_lost)

    def forkserver_ready(self, *, restarted: bool) -> None:
        if restarted and not self.stopping:
            self.replacements.begin_restart(announced=True)

    def restart_failed(self, reason: str) -> None:
        log.error("restart_failed", reason=reason, note="the old children keep running")
        hook_calls.call(self.hooks.restart_ended, False)

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        hook_calls.call(self.hooks.jobs_requeued, identity, moved, seconds)

    def _wait_for_forkservers(self, done: Callable[[], bool]) -> None:
        """At exit, with no children left: read answers and reap fork servers until `done`."""
        deadline = self.clock() + FINISH_WAIT_S
        while not done() and self.clock() < deadline:
            for key, _ in self.selector.select(min(TICK_S, max(0.0, deadline - self.clock()))):
                if key.data is None:
                    self.signal_pipe.drain()  # stopping already; a second TERM changes nothing
                elif not isinstance(key.data, Child):
                    self.spawner.on_readable(key.data)
            self._reap()
            self.spawner.tick()  # a hung fork server is still replaced, for the requeues

    # Deadlines and memory -------------------------------------------------------------------
    def _enforce_deadlines(self) -> None:
        now = self.clock()
        for child in self.roster:
            late = overdue(child, now, self.settings)
            if late is not None:
                (log.warning if late.expected else log.error)(late.event, **late.fields, **child.describe())
                self.procs.kill(child, late.reason)
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
            restarting=self.replacements.restarting or self.spawner.restart_loading,
            stopping=self.stopping,
            now=self.clock(),
            stuck_replaced=self.respawns.replaced["stuck"],
        )
