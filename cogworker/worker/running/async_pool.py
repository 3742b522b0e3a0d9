"""The async half of the Manager: sorting fetched jobs by kind, starting `async def` jobs on the
event loop, and their part of a stop.

A fetched job whose payload names an `async def` job goes to the async jobs waiting (`_async_waiting`)
instead of the job threads' queue. The loop starts them, up to `COGWORKER_ASYNC_CONCURRENCY` at once,
each as one task that runs the whole job (worker/running/async_process.py): middleware, body and
settling, with the sync path's accounting (processed/failed counters, retry, dead, status, unique
release, the ledger and the in-progress list entry). When a job's task ends, the loop starts the
next one waiting in the same step, so no slot sits empty while a job waits; the fetcher is woken
as a job thread's end wakes it.

Each running async job has a slot key in `_running` (a negative number: thread idents are
positive), which the heartbeat lists and the time-limit watchdog watches it by. A job with a rate
limiter runs on a bridge thread instead (`needs_a_thread`), keyed the same way.

How many jobs a fetch takes when both kinds run is worker/fetching/job_mix.py's business.
"""

from __future__ import annotations

import abc
import collections
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from cogworker import codec
from cogworker.api import registry
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.job_mix import JobMix
from cogworker.worker.fetching.reserve import Reserve
from cogworker.worker.fetching.wait_turn import Running
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.running.async_loop import AsyncLoop
from cogworker.worker.running.async_process import needs_a_thread, process_async
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.running.time_limits import TimeLimits
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.manager")

# An async job waiting for a slot: its work and its decoded payload.
Waiting = tuple[Work, dict[str, Any]]


class AsyncHandoff(abc.ABC):
    """State lives on the Manager, under `_cond`."""

    _cond: threading.Condition
    _running: dict[int, Running]
    _allowed: tuple[str, ...]
    _concurrency: int
    _queued: int
    _async_capacity: int
    _async_waiting: collections.deque[Waiting]
    _async_queued: int
    _async_running: int
    _async_batch_min: int
    _reserve: Reserve
    _stuck: set[int]
    _mix: JobMix
    _settler: Settler
    reconciler: Reconciler
    limits: TimeLimits
    stats: Stats
    loop: AsyncLoop

    @abc.abstractmethod
    def _give_back(self, work: Work) -> None: ...

    def _init_async(self) -> None:
        self._async_waiting = collections.deque()
        self._async_queued = 0  # waiting for a slot
        self._async_running = 0
        self._async_slots = itertools.count(-1, -1)

    def _is_async(self, work: Work) -> dict[str, Any] | None:
        """The decoded payload when the job `work` names is an `async def` job. Resolved here on
        the fetcher thread (importing its module if needed, as the job thread would); anything
        unreadable or unknown is "sync" (None): a job thread files it as before. Skipped while no
        async job is registered."""
        if not self._mix.has_async():
            return None
        name = codec.class_name(work.raw)  # not a whole decode of every job: the payload curve's profile
        if name is None:
            return None
        try:
            if not registry.resolve(name, allowed=self._allowed).is_async:
                return None
        except BaseException:  # an import's SystemExit too: the job thread files the failure
            return None
        return codec.loads_dict(work.raw)  # decoded once, for the job's task

    def _sort(self, works: list[Work]) -> tuple[list[Work], list[Waiting]]:
        """(sync, async) jobs of one fetch; the mix learns from it."""
        sync: list[Work] = []
        async_: list[Waiting] = []
        for work in works:
            job = self._is_async(work)
            if job is None:
                sync.append(work)
            else:
                async_.append((work, job))
        self._mix.observe(len(async_), len(works))
        return sync, async_

    def _hand_to_loop(self, waiting: list[Waiting]) -> None:
        """Queue async jobs for the loop (the ledger holds them already) and have it start them."""
        if not waiting:
            return
        with self._cond:
            self._async_queued += len(waiting)
            self._async_waiting.extend(waiting)
        self.loop.call_soon(self._start_waiting)

    def _moved_to_loop(self, ident: int, work: Work) -> bool:
        """A job the wait turn brought is async: it goes to the loop, and this thread is free."""
        waiting = self._sort([work])[1]
        if not waiting:
            return False
        with self._cond:
            del self._running[ident]
            self._cond.notify_all()
        self._hand_to_loop(waiting)
        return True

    def _start_waiting(self) -> None:
        """On the loop: start waiting jobs while slots are free."""
        loop = self.loop
        while True:
            with self._cond:
                if not self._async_waiting or self._async_running >= self._async_capacity:
                    return
                work, job = self._async_waiting.popleft()
                self._async_queued -= 1
                self._async_running += 1
                slot = next(self._async_slots)
                self._running[slot] = Running(work, time.time())
            loop.start_task(self._run_async(slot, work, job))

    async def _run_async(self, slot: int, work: Work, job: dict[str, Any]) -> None:
        """One async job's task: run it, let go of it, start the next one waiting."""
        failed, began = False, time.monotonic()
        try:
            if needs_a_thread(registry.resolve(job["class"], allowed=self._allowed)):
                await self.loop.run_sync(lambda: self._process_on_thread(slot, work))
            else:
                await process_async(
                    work,
                    job,
                    self._settler,
                    self.stats,
                    allowed=self._allowed,
                    loop=self.loop,
                    limits=self.limits,
                    slot=slot,
                )
        except GeneratorExit:  # destroyed unfinished: given up on by a stop, the process ending
            raise
        except BaseException:
            failed = True
            log.exception(
                "job_thread_error",
                note="requeued counting an orphaning: a job that keeps failing its thread ends in dead",
            )
        self._ended(slot, work, failed, began)

    def _ended(self, slot: int, work: Work, failed: bool, began: float) -> None:
        """On the loop, as an async job's task ends: let go of it, start the next one waiting."""

        def forget() -> None:
            if self._running.pop(slot, None) is not None:  # None: given up on as stuck
                self._async_running -= 1

        self._let_go(work, failed, began, forget, self._async_batch_min)
        self._start_waiting()

    def _let_go(
        self, work: Work, failed: bool, began: float, forget: Callable[[], object], batch_min: int
    ) -> None:
        """A job's end, on a job thread or the loop. The job is let go of only now: the settler holds
        it by now (or it is filed), so a reconcile never finds it unheld while it is still ours.
        `forget` drops it from the running jobs, under the lock. The fetcher is woken only when it
        would act: the first room for a job (it may be waiting with none), `batch_min` of room for a
        full batch, or nothing left running; waking it on every finished job costs a thread switch
        per job."""
        if failed:
            self.reconciler.thread_failed(work.raw)
        else:
            self.reconciler.release(work.raw)
        with self._cond:
            self._reserve.observe(time.monotonic() - began)
            before = self._room()
            forget()
            room = self._room()
            if failed or before <= 0 < room or room == batch_min or not self._running:
                self._cond.notify_all()

    def _process_on_thread(self, slot: int, work: Work) -> None:
        """A job with a rate limiter, on a bridge thread: the sync path, its body on the loop."""
        process(
            work,
            self._settler,
            self.stats,
            allowed=self._allowed,
            run_async=self.loop.run,
            limits=self.limits,
            slot=slot,
        )

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
        with self._cond:
            waiting = list(self._async_waiting)
            self._async_waiting.clear()
            self._async_queued -= len(waiting)
        for work, _job in waiting:
            self._give_back(work)

    def _stop_async(self, deadline: float) -> None:
        """Let running async jobs finish until `deadline`, then cancel the rest: their tasks never go
        on, so their jobs stay on the in-progress list for the stop's requeue."""
        with self._cond:
            while self._async_running > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=min(left, 0.1))
        if self.loop.running_tasks:
            cancelled = self.loop.cancel_all()
            log.warning("async_jobs_cancelled", count=cancelled, note="requeued: they will run again")
        else:
            self.loop.close()
