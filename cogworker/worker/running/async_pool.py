"""The async half of the Manager: sorting fetched jobs by kind, the carrier threads of `async def`
jobs, and their part of a stop.

A fetched job whose payload names an `async def` job goes to the async work queue instead of the job
threads'. A carrier thread takes it and runs it through `process` (processor.py) exactly as a job
thread would: decode, resolve, the server middleware chain, settle. Only the job's body, created
inside the chain, runs on the process's one event loop (async_loop.py); the carrier waits for it.
So the accounting (processed/failed counters, retry, dead, status, unique release, the ledger and
the in-progress list entry) is the sync path's, and existing sync middleware wraps an async job
unchanged. Carriers are started as jobs need them, at most `COGWORKER_ASYNC_CONCURRENCY`: that is
the number of async jobs running at once. A carrier only waits (no GIL, a small stack), so it costs
little more than a task would.

How many jobs a fetch takes when both kinds run is worker/fetching/job_mix.py's business.
"""

from __future__ import annotations

import abc
import queue
import threading
import time

import structlog

from cogworker import codec
from cogworker.api import registry
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.job_mix import JobMix
from cogworker.worker.fetching.reserve import Reserve
from cogworker.worker.fetching.wait_turn import Running
from cogworker.worker.running.async_loop import AsyncLoop

log = structlog.get_logger("cogworker.manager")


class AsyncHandoff(abc.ABC):
    """State lives on the Manager, under `_cond`; the carriers run the Manager's `_job_loop`."""

    _cond: threading.Condition
    _running: dict[int, Running]
    _allowed: tuple[str, ...]
    _concurrency: int
    _queued: int
    _async_capacity: int
    _async_work: queue.SimpleQueue[Work | None]
    _async_queued: int
    _async_running: int
    _carriers: list[threading.Thread]
    _reserve: Reserve
    _stuck: set[int]
    _mix: JobMix
    loop: AsyncLoop

    @abc.abstractmethod
    def _job_loop(self, source: queue.SimpleQueue[Work | None], is_async: bool) -> None: ...

    @abc.abstractmethod
    def _give_back(self, work: Work) -> None: ...

    def _is_async(self, work: Work) -> bool:
        """The job `work` names is an `async def` job. Resolved here on the fetcher thread (importing
        its module if needed, as the job thread would); anything unreadable or unknown is "sync": a
        job thread files it as before. Skipped while no async job is registered."""
        if not self._mix.has_async():
            return False
        name = codec.class_name(work.raw)  # not a whole decode per job: the payload curve's profile
        if name is None:
            return False
        try:
            return registry.resolve(name, allowed=self._allowed).is_async
        except BaseException:  # an import's SystemExit too: the job thread files the failure
            return False

    def _sort(self, works: list[Work]) -> tuple[list[Work], list[Work]]:
        """(sync, async) jobs of one fetch; the mix learns from it."""
        sync: list[Work] = []
        async_: list[Work] = []
        for work in works:
            (async_ if self._is_async(work) else sync).append(work)
        self._mix.observe(len(async_), len(works))
        return sync, async_

    def _hand_to_loop(self, works: list[Work]) -> None:
        """Queue async jobs for the carriers (the ledger holds them already)."""
        if not works:
            return
        with self._cond:
            self._async_queued += len(works)
            self._start_carriers()
        for work in works:
            self._async_work.put(work)

    def _moved_to_loop(self, ident: int, work: Work) -> bool:
        """A job the wait turn brought is async: it goes to a carrier, and this thread is free."""
        if not self._sort([work])[1]:
            return False
        with self._cond:
            del self._running[ident]
            self._cond.notify_all()
        self._hand_to_loop([work])
        return True

    def _start_carriers(self) -> None:
        """Enough carriers for the async jobs held, up to the async capacity (lock held)."""
        wanted = min(self._async_capacity, self._async_running + self._async_queued)
        while len(self._carriers) < wanted:
            carrier = threading.Thread(
                target=self._job_loop,
                args=(self._async_work, True),
                name=f"async-job-{len(self._carriers)}",
                daemon=True,
            )
            carrier.start()
            self._carriers.append(carrier)

    def _free_async(self) -> int:
        """Async slots with no job running or waiting (lock held; negative: jobs wait)."""
        return self._async_capacity - self._async_running - self._async_queued

    def _free_threads(self) -> int:
        """Job threads with no job, running or handed over (lock held; negative: jobs wait)."""
        return self._concurrency - (len(self._running) - self._async_running) - self._queued

    def _room(self) -> int:
        """How many jobs the next fetch may take (lock held): worker/fetching/job_mix.py."""
        return self._mix.room(self._free_threads() + self._reserve.extra, self._free_async())

    def _give_back_async_unstarted(self) -> None:
        while True:
            try:
                work = self._async_work.get_nowait()
            except queue.Empty:
                return
            if work is None:
                continue
            with self._cond:
                self._async_queued -= 1
            self._give_back(work)

    def _stop_carriers(self, deadline: float) -> None:
        """Let running async jobs finish until `deadline`, then cancel the rest: their carriers never
        return, so their jobs stay on the in-progress list for the stop's requeue."""
        for _ in self._carriers:
            self._async_work.put(None)
        for carrier in self._carriers:
            if carrier.ident in self._stuck:  # given up on (stuck_jobs.py): it may never return
                continue
            carrier.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.loop.running_tasks:
            cancelled = self.loop.cancel_all()
            log.warning("async_jobs_cancelled", count=cancelled, note="requeued: they will run again")
        else:
            self.loop.close()
