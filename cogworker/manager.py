"""The manager: one fetcher thread feeding a fixed pool of job threads.

The fetcher only takes as many jobs as there are idle threads, so a job never waits in this
process's memory while another process could run it. Jobs it has taken sit on this process's
in-progress list (reliable fetch) until acknowledged; acknowledgements ride along with the next
fetch, saving a round trip per job.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from cogworker.fetch import BasicFetch, Fetcher, Work
from cogworker.outage import Outages
from cogworker.processor import Stats, process
from cogworker.settings import Settings
from cogworker.settle import Settler

log = structlog.get_logger("cogworker.manager")

IDLE_POLL_FIRST_S = 0.25
BLOCK_TIMEOUT_S = 1.0
OUTAGE_RETRY_S = 1.0
# Under load, wait at most this long for more threads to come free before fetching for them.
COALESCE_S = 0.001


@dataclass(slots=True)
class Running:
    work: Work
    started_at: float


class Manager:
    def __init__(
        self,
        settings: Settings,
        fetcher: Fetcher,
        settler: Settler,
        outages: Outages,
        stats: Stats,
        fallback: Callable[[], BasicFetch] | None = None,
    ) -> None:
        self._settings = settings
        self.fetcher = fetcher
        self._settler = settler
        self._outages = outages
        self.stats = stats
        self._fallback = fallback
        self._concurrency = settings.concurrency
        self._batch_min = max(1, settings.concurrency // 2)
        self._work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._queued = 0
        self._running: dict[int, Running] = {}
        self._quiet = False
        self._stopping = False
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fetcher_thread: threading.Thread | None = None
        self._rng = random.Random()
        self._wrong_type_logged: dict[str, float] = {}
        self.on_wrong_type: Callable[[], None] | None = None

    # Lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        for index in range(self._concurrency):
            thread = threading.Thread(target=self._job_loop, name=f"job-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._fetcher_thread = threading.Thread(target=self._fetch_loop, name="fetcher", daemon=True)
        self._fetcher_thread.start()

    def quiet(self) -> None:
        with self._cond:
            self._quiet = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            if not self._stopping:
                self._quiet = False
            self._cond.notify_all()

    @property
    def is_quiet(self) -> bool:
        return self._quiet

    @property
    def busy(self) -> int:
        with self._cond:
            return len(self._running)

    def running(self) -> list[tuple[str, Running]]:
        with self._cond:
            return [(f"t{ident}", r) for ident, r in self._running.items()]

    def stop(self, deadline: float) -> list[Work]:
        """Stop fetching, give back unstarted jobs, wait for running ones until `deadline`
        (monotonic). Returns the jobs still running then."""
        with self._cond:
            self._stopping = True
            self._quiet = True
            self._cond.notify_all()
        self._wake.set()
        if self._fetcher_thread is not None:
            self._fetcher_thread.join(timeout=max(0.0, deadline - time.monotonic()) + BLOCK_TIMEOUT_S)
        self._give_back_unstarted()
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.flush_acks()
        self._settler.retry_pending()
        with self._cond:
            return [r.work for r in self._running.values()]

    # Threads -------------------------------------------------------------------------------
    def _job_loop(self) -> None:
        ident = threading.get_ident()
        while True:
            work = self._work.get()
            if work is None:
                return
            with self._cond:
                self._queued -= 1
                self._running[ident] = Running(work, time.time())
            try:
                process(work, self._settler, self.stats)
            except BaseException:
                log.exception("job_thread_error", note="the job stays in progress and will run again")
            finally:
                with self._cond:
                    del self._running[ident]
                    self._cond.notify_all()

    def _fetch_loop(self) -> None:
        idle_s = 0.0
        while not self._stopping:
            if self._settler.pending_filings:
                self._settler.retry_pending()
            with self._cond:
                free = self._concurrency - len(self._running) - self._queued
                if self._quiet or free <= 0:
                    if not self._settler.pending_acks:
                        self._cond.wait(timeout=BLOCK_TIMEOUT_S)
                        continue
                    free = 0
                elif free < self._batch_min and self._running:
                    # Busy, with a slot or two free: give other running jobs a moment to finish,
                    # so one round trip fetches (and acknowledges) several jobs, not one.
                    self._cond.wait(timeout=COALESCE_S)
                    free = self._concurrency - len(self._running) - self._queued
            found = self._fetch_once(free)
            if found is None:  # Redis failed: wait a little, interruptibly
                self._wake.wait(OUTAGE_RETRY_S)
                continue
            if found or free == 0:
                idle_s = 0.0
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
            self._outages.report("Fetch", exc)
            return None
        self._outages.recovered("Fetch")
        if result.wrong_type_queues:
            self._report_wrong_type(result.wrong_type_queues)
        self._enqueue(result.works)
        if result.all_paused:
            self._wake.wait(BLOCK_TIMEOUT_S)
        return len(result.works)

    def _report_wrong_type(self, queues: list[str]) -> None:
        """Logged once per minute per queue; the key guard is asked to move the key aside now."""
        now = time.monotonic()
        fresh = [q for q in queues if self._wrong_type_logged.get(q, 0.0) < now - 60]
        if fresh:
            log.error("queue_key_has_wrong_type", queues=fresh, note="skipped; the key guard moves it aside")
            self._wrong_type_logged.update(dict.fromkeys(fresh, now))
        if self.on_wrong_type is not None:
            self.on_wrong_type()

    def _blocking_wait(self) -> bool:
        """Block on the queue when the fetcher can (one queue): a pushed job starts at once."""
        if not self.fetcher.can_block:
            return False
        try:
            work = self.fetcher.wait(BLOCK_TIMEOUT_S)
        except Exception as exc:
            if not self._fall_back_if_unsupported(exc):
                self._outages.report("Fetch", exc)
                self._wake.wait(OUTAGE_RETRY_S)
            return True
        if work is None:
            return True
        if self._quiet or self._stopping:
            # Quiet (or stop) arrived while we were blocked: this job was never ours to start.
            try:
                self.fetcher.give_back(work)
            except Exception as exc:
                self._outages.report("Fetch", exc)
            return True
        self._enqueue([work])
        return True

    def _fall_back_if_unsupported(self, exc: Exception) -> bool:
        from cogworker.fetch import UnsupportedError

        if not isinstance(exc, UnsupportedError) or self._fallback is None:
            return False
        log.warning("reliable_fetch_unsupported", error=str(exc), note="falling back to basic fetch (BRPOP)")
        self.fetcher = self._fallback()
        return True

    def _enqueue(self, works: list[Work]) -> None:
        if not works:
            return
        with self._cond:
            self._queued += len(works)
        for work in works:
            self._work.put(work)

    def flush_acks(self) -> None:
        if not self._settler.pending_acks:
            return
        acks = self._settler.take_acks()
        try:
            self.fetcher.fetch(0, acks)
        except Exception as exc:
            self._settler.return_acks(acks)
            self._outages.report("Fetch", exc)

    def _give_back_unstarted(self) -> None:
        while True:
            try:
                work = self._work.get_nowait()
            except queue.Empty:
                return
            if work is None:
                continue
            with self._cond:
                self._queued -= 1
            try:
                self.fetcher.give_back(work)
            except Exception as exc:
                self._outages.report("Fetch", exc)
