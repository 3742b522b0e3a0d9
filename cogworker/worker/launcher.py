"""The launcher: everything one worker process runs, started and stopped in the right order.

Start: wait for Redis (unreachable at boot is not a crash), first heartbeat before the first fetch,
then the manager (fetcher + job threads), heartbeat and poller. Stop: stop fetching, drain running
jobs until `timeout_s`, requeue whatever is left (it is worse to lose a job than to run it twice),
and only then stop the heartbeat, so the process looks alive for as long as it holds jobs.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import structlog
from setproctitle import setproctitle

from cogworker import __version__, exitcodes
from cogworker.api import registry, unique
from cogworker.settings_fields import SettingsFields
from cogworker.store import shards
from cogworker.store.connection import connect
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.command_pipe import CommandPipe
from cogworker.worker.fetching.fetch_choice import FetchChoice, reliable_supported
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.fetching.wait_turn import BLOCK_TIMEOUT_S
from cogworker.worker.loops.heartbeat import Heartbeat
from cogworker.worker.loops.poller import Poller
from cogworker.worker.loops.ticker import Ticker
from cogworker.worker.manager import Manager
from cogworker.worker.metrics.flusher import Flusher
from cogworker.worker.metrics.sidekiq_recorder import new_recorder
from cogworker.worker.recovering import partition_lists
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.running.cancelled import CancelWatch
from cogworker.worker.running.death_hooks import DeathHookRunner
from cogworker.worker.running.processor import Stats
from cogworker.worker.running.time_limits import Armed
from cogworker.worker.settling import shard_route
from cogworker.worker.settling.handover import flush_acks
from cogworker.worker.settling.settle import Settler
from cogworker.worker.settling.shard_route import ShardRoute
from cogworker.worker.supervisor_events import Reporter
from cogworker.worker.thread_dump import dump_threads

log = structlog.get_logger("cogworker.launcher")

STATUS_INTERVAL_S = 1.0


class Launcher:
    def __init__(
        self,
        settings: SettingsFields,
        identity: str,
        reporter: Reporter,
        *,
        slot: int | None = None,
        quiet: bool = False,
        commands: CommandPipe | None = None,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self.reporter = reporter
        self.slot = slot
        # Start quiet: a swarm child respawned while the swarm is quiet must not fetch even once.
        self.start_quiet = quiet
        self.ctx = RedisContext.build(settings)
        self.redis = self.ctx.client
        self.outages = self.ctx.outages
        self.scripts = self.ctx.scripts
        self.blocking_redis = connect(settings, extra_timeout_s=BLOCK_TIMEOUT_S + 1.0)
        self.stats = Stats(new_recorder(settings))
        self.flusher: Flusher | None = None
        self.commands = commands or CommandPipe()
        self.manager: Manager | None = None
        self.heartbeat: Heartbeat | None = None
        self.poller: Poller | None = None
        # The sharded layout (store/shards.py): one client per queue partition's slot, and where each
        # fetched job's ack and settle go (worker/settling/shard_route.py). None in the one-slot layout.
        self.route: ShardRoute | None = None
        if shards.is_sharded():
            clients = ShardClients(settings, home=self.redis)
            self.route = ShardRoute(clients, identity, Placements(), PartitionHealth(clients))
        shard_route.use(self.route)
        # Sharded: recovery, the reconcile and the poller reach each partition through the same clients.
        self.recovery = Recovery(self.ctx, identity, self.route.clients if self.route else None)
        self.death_hooks = DeathHookRunner(self.ctx, clients=self.route.clients if self.route else None)
        self.fetch_choice = FetchChoice(
            settings, self.redis, self.blocking_redis, self.scripts, identity, self.route
        )
        self.settler: Settler | None = None
        self.cancels: CancelWatch | None = None
        self.exit_code = exitcodes.OK

    # Commands from signals (main thread) and from the heartbeat's remote commands.
    def command(self, name: str) -> None:
        self.commands.send(name)

    def run(self) -> int:
        self.reporter.send("booted", pid=os.getpid(), identity=self.identity)
        self._title("booting")
        if not self._wait_for_redis():
            self.reporter.send("stopped", code=exitcodes.OK)
            return exitcodes.OK
        if self.route is not None and not reliable_supported(self.redis):
            log.error(
                "sharded_layout_needs_reliable_fetch",
                note="COGWORKER_CLUSTER_SHARDING=queues runs reliable fetch only (LMOVE, Redis 6.2 or later, "
                "allowed to the ACL user): basic fetch's BRPOP would block on one partition's slot only",
            )
            self.reporter.send("stopped", code=exitcodes.CONFIG_ERROR)
            return exitcodes.CONFIG_ERROR
        fetcher = self.fetch_choice.choose()
        self.settler = Settler(self.ctx, fetcher.in_progress_key, route=self.route)
        # No fallback to basic fetch in the sharded layout: a refused LMOVE stays an error.
        fallback = self.fetch_choice.basic if self.route is None else None
        self.manager = Manager(self.ctx, fetcher, self.settler, self.stats, fallback=fallback)
        if self.start_quiet:
            self.manager.quiet()
        self.manager.on_stuck = self._job_stuck
        self.heartbeat = Heartbeat(
            self.ctx,
            self.identity,
            reliable=fetcher.keeps_in_progress,
            busy=lambda: self.manager.busy if self.manager else 0,
            running=self._running_jobs,
            quiet=lambda: self.manager.is_quiet if self.manager else False,
            stopping=lambda: self.manager.is_stopping if self.manager else False,
            on_command=self.command,
            tag=f"slot {self.slot}" if self.slot is not None else "",
            version=__version__,
            # Shown beside the job threads only where async jobs can run (a process without any
            # never starts an async job, whatever the setting).
            async_slots=self.ctx.settings.async_concurrency
            if registry.has_async(self.ctx.settings.require_modules)
            else 0,
        )
        # The first beat comes before the first fetch: a live process's list is never an orphan.
        while not self.heartbeat.beat_guarded():
            if self._wait_or_stop(1.0):
                self.reporter.send("stopped", code=exitcodes.OK)
                return exitcodes.OK
        clients = self.route.clients if self.route else None  # the sharded layout's, for its pushes
        ticker = Ticker(self.ctx, quiet=lambda: bool(self.manager and self.manager.is_quiet), clients=clients)
        self.poller = Poller(
            self.ctx,
            self.recovery,
            quiet=lambda: self.manager.is_quiet if self.manager else False,
            scan_at_boot=fetcher.keeps_in_progress,
            extra_tasks=[self.recovery.retry_burials, ticker.poll, unique.retry_deferred_releases],
            shard_health=self.route.health if self.route is not None else None,
        )
        self.manager.on_wrong_type = self.poller.check_keys_soon
        # Cancels are known before the first fetch: a job cancelled while its process died is
        # recovered onto a queue, and must not run when fetched here (worker/running/cancelled.py).
        self.cancels = CancelWatch(self.ctx)
        self.cancels.start()
        self.manager.reconciler.on_buried = self.recovery.complete_burials
        # Sharded: this process's list in each queue partition, each reconciled in its own slot.
        self.manager.reconciler.partition_lists = partition_lists.own_lists(
            self.recovery,
            self.identity,
            self.ctx.settings.queue_spec.names,
            self.route.health if self.route else None,
        )
        # What is loaded by now lives as long as the process. Out of the collector's reach, a full
        # collection no longer walks ~50,000 objects (over 20 ms, a stall every job would feel), and a
        # forked child stops copying the pages it shares with the supervisor when it collects.
        gc.collect()
        gc.freeze()
        self.manager.start()
        self.heartbeat.start()
        self.poller.start()
        self.death_hooks.start()
        if self.stats.metrics is not None:
            self.flusher = Flusher(
                self.ctx,
                self.identity,
                self.stats.metrics,
                queues=self.settings.queue_spec.names,
                interval_s=self.settings.metrics_flush_s,
            )
            self.flusher.start()
        log.info(
            "worker_ready",
            queues=self.settings.queues,
            concurrency=self.settings.concurrency,
            fetch="reliable" if fetcher.keeps_in_progress else "basic",
        )
        # Status first: the supervisor may tell systemd READY (with a status text) on this "ready",
        # and the text should count this process's threads.
        self._send_status()
        self.reporter.send("ready", pid=os.getpid(), identity=self.identity)
        self._main_loop()
        return self._shutdown()

    def _wait_for_redis(self) -> bool:
        """Redis unreachable at boot is not a crash: wait, report it, start when it returns."""
        while True:
            try:
                self.redis.ping()
            except Exception as exc:
                self.outages.report("Boot", exc)
                self.reporter.send(
                    "status",
                    redis="down",
                    busy=0,
                    threads=self.settings.concurrency,
                    processed=0,
                    failed=0,
                    quiet=False,
                    booting=True,
                )
                if self._wait_or_stop(1.0):
                    return False
                continue
            self.outages.recovered("Boot")
            return True

    def _wait_or_stop(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when told to stop meanwhile."""
        commands = self.commands.wait(seconds)
        if self.reporter.orphaned():
            return True
        return "stop" in commands

    def _running_jobs(self) -> list[tuple[str, dict[str, Any]]]:
        if self.manager is None:
            return []
        return [
            (thread, {"queue": r.work.queue, "payload": r.work.raw, "run_at": r.started_at})
            for thread, r in self.manager.running()
        ]

    def _main_loop(self) -> None:
        assert self.manager is not None
        next_status = time.monotonic() + STATUS_INTERVAL_S  # the first was sent before "ready"
        while True:
            now = time.monotonic()
            if now >= next_status:
                self._send_status()
                next_status = now + STATUS_INTERVAL_S
            for name in self.commands.wait(next_status - time.monotonic()):
                if name == "stop":
                    return
                # Each takes effect before it is logged: whoever waits for the line (an operator,
                # a test) may push at once, and a job must not start in between.
                if name == "quiet":
                    self.manager.quiet()
                    log.info("quieting", note="no new jobs; running ones finish")
                elif name == "resume":
                    self.manager.resume()
                    log.info("resuming")
                elif name == "dump":
                    dump_threads()
                elif name == "stuck":  # run alone (a swarm child is replaced by its supervisor)
                    log.error(
                        "worker_stopping_for_stuck_job",
                        note="a job thread is stuck past its time limit: stopping gracefully, exit 1, "
                        "so the process manager starts a fresh worker",
                    )
                    self.exit_code = exitcodes.FAILURE
                    return
            if self.reporter.orphaned():
                log.error("supervisor_gone", note="stopping: a worker never runs unsupervised")
                return

    def _send_status(self) -> None:
        assert self.manager is not None
        busy = self.manager.busy
        quiet = self.manager.is_quiet
        self.reporter.send(
            "status",
            busy=busy,
            threads=self.settings.concurrency,
            processed=self.stats.processed,
            failed=self.stats.failed,
            redis="down" if self.outages.down else "up",
            quiet=quiet,
            jobs=self.stats.jobs.take(),
        )
        self._title(f"{busy}/{self.settings.concurrency} busy{' quiet' if quiet else ''}")

    def _title(self, state: str) -> None:
        role = f"cogworker worker [slot {self.slot}]" if self.slot is not None else "cogworker worker"
        setproctitle(f"{role} {state}")

    def _shutdown(self) -> int:
        assert self.manager and self.heartbeat and self.poller and self.settler
        self.reporter.send("stopping")
        self._title("stopping")
        log.info("stopping", timeout_s=self.settings.timeout_s, busy=self.manager.busy)
        self.poller.stop()
        self.death_hooks.stop()
        deadline = time.monotonic() + self.settings.timeout_s
        left = self.manager.stop(deadline)
        if left:
            log.warning("hard_shutdown", still_running=len(left), note="requeueing them: they will run again")
        # Both tried again until the deadline while Redis doesn't answer (worker/settling/handover.py), the
        # acknowledgements last: right before the requeue, which would run their jobs again.
        self.settler.hand_over(deadline)
        flush_acks(self.manager.fetcher, self.settler, deadline)
        list_empty = True
        try:
            fetcher = self.manager.fetcher
            if not fetcher.keeps_in_progress:
                for work in left:  # after a fallback, one fetched before it goes back from the list
                    fetcher.give_back(work)
            # The list registered at start; after a fallback it may still hold jobs fetched before.
            if self.heartbeat.reliable:
                result = self.recovery.requeue(self.identity, if_dead_for=None, count_orphans=False)
                # A reply lost just before the stop, or a wait still blocked on the queue, may put a
                # job on the list after this requeue: then the list stays registered for recovery.
                list_empty = result.failed == 0 and not self.manager.may_have_strays
                if result.moved:
                    log.info("requeued_own_jobs", count=result.moved)
        except Exception as exc:
            list_empty = False
            self.outages.report("Shutdown", exc)
            log.error(
                "requeue_at_shutdown_failed",
                note="jobs stay on the in-progress list; "
                "orphan recovery requeues them after the orphan threshold",
            )
        if self.flusher is not None:  # after the drain: the last jobs' counts go with it
            self.flusher.stop()
        self.heartbeat.stop()
        if self.cancels is not None:  # after the drain: a job running until then can still be cancelled
            self.cancels.stop()
        try:
            self.heartbeat.clear(list_empty=list_empty)
        except Exception as exc:
            self.outages.report("Shutdown", exc)
        log.info("stopped", processed=self.stats.processed, failed=self.stats.failed)
        self.reporter.send("stopped", code=self.exit_code, jobs=self.stats.jobs.take())
        return self.exit_code

    def _job_stuck(self, armed: Armed) -> None:
        """On the watchdog thread, once the stuck job is filed (worker/running/stuck_jobs.py): the supervisor
        replaces this process gracefully; run alone, the main loop stops it."""
        if self.reporter.supervised:
            job = armed.job
            self.reporter.send("stuck", jid=job.get("jid"), job=job.get("class"), queue=armed.work.queue)
        else:
            self.commands.send("stuck")
