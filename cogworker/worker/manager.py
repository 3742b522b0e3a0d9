"""The manager: one fetcher thread feeding a fixed pool of job threads.

The fetcher takes as many jobs as there are idle threads, a few more while jobs are short
(worker/fetching/reserve.py), so a job never waits long in memory while another process could run
it. Jobs it has taken sit on this process's in-progress list (reliable fetch) until acknowledged;
acknowledgements ride along with the next fetch, saving a round trip per job. When the queues run
dry and there is only one, the fetcher hands the blocking wait (BLMOVE) to an idle job thread, which
runs the job it gets itself. When every queue it reads is paused it blocks on none of them: it waits
for a wake-up (a push or a resume).

`async def` jobs run beside the threads, up to COGWORKER_ASYNC_CONCURRENCY at once on the process's
event loop, each as one task from its start to its settling; worker/running/async_pool.py sorts
fetched jobs by kind and starts them, and worker/fetching/job_mix.py sizes a fetch for both kinds.

Every job the process holds is in the reconciler's ledger (worker/recovering/reconcile.py): after a
fetch, BLMOVE or give-back fails (its reply may be lost with the jobs already moved), or a job
thread fails, the fetcher puts every entry of the in-progress list the process doesn't hold back on
its queue.

Quiet and the stop (giving back what was not started, waiting for what runs) are manager_stop.py's.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from cogworker.store import key_guard
from cogworker.store.redis_context import RedisContext
from cogworker.worker.fetching.fetch import Fetcher, UnsupportedError, Work
from cogworker.worker.fetching.fetch_fallback import FetchFallback
from cogworker.worker.fetching.job_mix import JobMix
from cogworker.worker.fetching.reserve import Reserve
from cogworker.worker.fetching.wait_turn import (
    BLOCK_TIMEOUT_S,
    OUTAGE_RETRY_S,
    Running,
    WaitTurn,
    WaitTurnHandoff,
)
from cogworker.worker.manager_stop import ManagerStop
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.running.async_loop import AsyncLoop
from cogworker.worker.running.async_pool import AsyncHandoff
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.running.stuck_jobs import StuckThreads
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.manager")

IDLE_POLL_FIRST_S = 0.25
# Under load, wait at most this long for more threads to come free before fetching for them.
COALESCE_S = 0.001


class Manager(FetchFallback, WaitTurnHandoff, AsyncHandoff, StuckThreads, ManagerStop):
    def __init__(
        self,
        ctx: RedisContext,
        fetcher: Fetcher,
        settler: Settler,
        stats: Stats,
        fallback: Callable[[], Fetcher] | None = None,
        run_job: Callable[[Work], None] | None = None,
    ) -> None:
        settings = ctx.settings
        self._settings = settings
        self.fetcher = fetcher
        self._settler = settler
        self._outages = ctx.outages
        self.stats = stats
        self._fallback = fallback
        self._concurrency = settings.concurrency
        # COGWORKER_REQUIRE, parsed once: the only modules a payload's job may be imported from.
        self._allowed = settings.require_modules
        # What a job thread runs; tests pass their own to make a thread fail outside the processor.
        self._run_job = run_job or self._process
        self._batch_min = max(1, settings.concurrency // 2)
        self._reserve = Reserve(
            settings.concurrency // 2
        )  # worker/fetching/reserve.py: none for a single thread
        self._work: queue.SimpleQueue[Work | WaitTurn | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._queued = 0
        self._running: dict[int, Running] = {}
        # `async def` jobs (worker/running/async_pool.py): those waiting for a slot, and the event loop.
        self._async_capacity = settings.async_concurrency
        self._init_async()
        self._async_batch_min = max(1, settings.async_concurrency // 2)
        self._mix = JobMix(settings.concurrency, settings.async_concurrency, self._allowed)
        self.loop = AsyncLoop(settings.async_lag_threshold_s)
        self._init_time_limits(
            settings
        )  # the watchdog, and the threads given up on (worker/running/stuck_jobs.py)
        self._quiet = False
        self._stopping = False
        self._turn_open = False  # a blocking wait is handed out (one queue, idle)
        self._turn_blocking = False  # ... and a job thread is inside it
        self._turn_error: Exception | None = None
        self._all_paused = False  # the last fetch found every queue we read paused
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fetcher_thread: threading.Thread | None = None
        self._rng = random.Random()
        self._wrong_type_logged: dict[str, float] = {}
        self.on_wrong_type: Callable[[], None] | None = None
        self.reconciler = Reconciler(ctx, settler, on_wrong_type=self._wrong_type_found)

    # Start, and what is running -------------------------------------------------------------
    def start(self) -> None:
        for index in range(self._concurrency):
            thread = threading.Thread(
                target=self._job_loop, args=(self._work,), name=f"job-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._fetcher_thread = threading.Thread(target=self._fetch_loop, name="fetcher", daemon=True)
        self._fetcher_thread.start()

    @property
    def busy(self) -> int:
        with self._cond:
            return len(self._running)

    def running(self) -> list[tuple[str, Running]]:
        with self._cond:
            return [(f"t{ident}", r) for ident, r in self._running.items()]

    # Threads -------------------------------------------------------------------------------
    def _job_loop(self, source: queue.SimpleQueue[Any]) -> None:
        """A job thread: takes jobs (or a wait turn) from `source`, the work queue."""
        ident = threading.get_ident()
        while True:
            item = source.get()
            if item is None:
                return
            if isinstance(item, WaitTurn):
                taken = self._take_wait_turn(ident)
                if taken is None:
                    continue
                if self._moved_to_loop(ident, taken):
                    continue
                work = taken
            else:
                work = item
                with self._cond:
                    self._queued -= 1
                    self._running[ident] = Running(work, time.time())
            failed, began = False, time.monotonic()
            try:
                self._run_job(work)
            except BaseException:
                failed = True
                log.exception(
                    "job_thread_error",
                    note="requeued counting an orphaning: a job that keeps failing its thread ends in dead",
                )
            finally:
                self._let_go(work, failed, began, lambda: self._running.pop(ident), self._batch_min)

    def _process(self, work: Work) -> None:
        run, limits = self.loop.run, self.limits
        process(work, self._settler, self.stats, allowed=self._allowed, run_async=run, limits=limits)

    def _await_room(self) -> int | None:
        """Wait until a fetch is worth its round trip; how many jobs to fetch (0: only send the
        pending acknowledgements), or None when nothing is to be done yet."""
        with self._cond:
            free = self._room()
            if self._quiet or free <= 0:
                self._cond.wait(timeout=BLOCK_TIMEOUT_S)
                # Every thread still busy (long jobs) or quiet: acknowledge what finished meanwhile,
                # so finished jobs don't sit on the in-progress list for the whole run.
                if (self._quiet or self._room() <= 0) and self._settler.pending_acks:
                    return 0
                return None
            # Busy, with fewer threads free than a batch: give other running jobs a moment to
            # finish, so one round trip fetches (and acknowledges) several jobs, not one.
            deadline = time.monotonic() + COALESCE_S
            while free < self._batch_min and self._running and not (self._quiet or self._stopping):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
                free = self._room()
            return free if not self._quiet else None

    def _fetch_loop(self) -> None:
        idle_s = 0.0
        while not self._stopping:
            if self._settler.pending_filings:
                self._settler.retry_pending()
            self.reconciler.run_if_due(self.fetcher)
            free = self._await_room()
            if free is None:
                self.fetcher.discard_backlog()
                continue
            found = self._fetch_once(free)
            if found is None:  # Redis failed: wait a little, interruptibly
                self._wake.wait(OUTAGE_RETRY_S)
                continue
            if found or free == 0:
                idle_s = 0.0
                continue
            if self._all_paused:
                self._wait_while_paused()
                continue
            if self._blocking_wait():
                idle_s = 0.0
                continue
            idle_s = min(idle_s * 2 or IDLE_POLL_FIRST_S, self._settings.fetch_idle_max_s)
            self._wake.wait(idle_s * (0.75 + self._rng.random() * 0.25))
        self.flush_acks()
        self.fetcher.close()

    def _fetch_once(self, limit: int) -> int | None:
        acks = self._settler.take_acks()
        try:
            result = self.fetcher.fetch(limit, acks)
        except Exception as exc:
            self._settler.return_acks(acks)
            if self._fall_back_if_unsupported(exc):
                return 0
            self.reconciler.lost_reply()
            self._outages.report("Fetch", exc)
            if key_guard.is_wrong_type(exc) and self.on_wrong_type is not None:
                # A key the script writes besides the queues (a counter, the in-progress list):
                # the key guard moves it aside now, rather than at its next pass.
                self.on_wrong_type()
            return None
        self._outages.recovered("Fetch")
        if result.unsent_acks or result.lost_reply:
            # Sharded layout: one partition's master failed while others answered (sharded_fetch.py).
            self._settler.return_acks(result.unsent_acks)
            if result.lost_reply:
                self.reconciler.lost_reply()
        if result.wrong_type_queues:
            self._report_wrong_type(result.wrong_type_queues)
        self._enqueue(result.works)
        if result.unsupported and self._fall_back_if_unsupported(UnsupportedError(result.unsupported)):
            return len(result.works)
        if limit > 0:
            self._all_paused = result.all_paused
        return len(result.works)

    def _wait_while_paused(self) -> None:
        """Every queue we read is paused: block on none of them (a BLMOVE would take from a paused
        queue). Wait for a wake-up (a push, or a resume: `cogworker queue resume` sends one), then
        fetch again, which sees whether the pause still holds."""
        try:
            self.fetcher.wait_for_wake(BLOCK_TIMEOUT_S)
        except Exception as exc:
            self._outages.report("Fetch", exc)
            self._wake.wait(OUTAGE_RETRY_S)

    def _blocking_wait(self) -> bool:
        """Block when the fetcher can: one queue, on the queue itself (a pushed job starts at once);
        several, on a push's wake-up message (no command blocks on many lists and moves atomically)."""
        if not self.fetcher.can_block:
            return False
        with self._cond:
            # Every job thread busy (room for async jobs only): the turn would wait for a thread.
            thread_free = self._free_threads() > 0
        if self.fetcher.wait_returns_job and thread_free:
            return self._hand_wait_to_a_job_thread()
        try:
            self.fetcher.wait_for_wake(BLOCK_TIMEOUT_S)
        except Exception as exc:
            self._outages.report("Fetch", exc)
            self._wake.wait(OUTAGE_RETRY_S)
        return True

    def _enqueue(self, works: list[Work]) -> None:
        if not works:
            return
        self.reconciler.hold(works)
        works, waiting = self._sort(works)
        self._hand_to_loop(waiting)
        with self._cond:
            self._queued += len(works)
        for work in works:
            self._work.put(work)

    def _give_back(self, work: Work) -> None:
        """A job taken but never started goes back to its queue; if Redis is away it stays on our
        in-progress list, and the next reconcile (or the requeue at stop) puts it back."""
        try:
            self.fetcher.give_back(work)
        except Exception as exc:
            self.reconciler.lost_reply()
            self._outages.report("Fetch", exc)
        finally:
            self.reconciler.release(work.raw)
