"""The Manager's half of a stuck job: a job still running `COGWORKER_JOB_TIMEOUT_GRACE_S` past its
time limit, in a call no exception reaches (time_limits.py says how it is found).

The worker files it itself, at once, as failed with JobTimeout through the Settler and its retry
policy (retry, or dead), counts it, and takes it off the in-progress list: it is never requeued, by
this process's stop or by recovery. Its thread is given up on: it no longer counts as a job thread
(the fetcher takes one job less from then on), a stop doesn't wait for it, and if its call ever
returns it parks (time_limits.py), so it never settles, counts or acknowledges the job again. Then
`on_stuck` tells the launcher, which reports `stuck` to the supervisor (the swarm replaces this
process gracefully) or, run alone, stops the worker so its process manager starts a fresh one.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable

import structlog

from cogworker.api import results, retry
from cogworker.api.job_status import record_failed
from cogworker.api.registry import registered
from cogworker.api.time_limits import JobTimeout
from cogworker.settings_fields import SettingsFields
from cogworker.store.outage import Outages
from cogworker.worker.fetching.wait_turn import Running
from cogworker.worker.running.processor import Stats
from cogworker.worker.running.time_limits import Armed, TimeLimits
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.job")


class StuckThreads(abc.ABC):
    """State lives on the Manager, under `_cond`."""

    _cond: threading.Condition
    _running: dict[int, Running]
    _concurrency: int
    _async_capacity: int
    _async_running: int
    _settler: Settler
    _settings: SettingsFields
    _outages: Outages
    _stuck: set[int]
    stats: Stats
    on_stuck: Callable[[Armed], None] | None

    limits: TimeLimits

    def _init_time_limits(self, settings: SettingsFields) -> None:
        self.limits = TimeLimits(
            settings.job_timeout_s, settings.job_timeout_grace_s, on_stuck=self._job_stuck
        )
        self._stuck = set()  # the idents of threads given up on
        self.on_stuck = None  # the launcher's: report it (or stop, run alone)

    @property
    def stuck_threads(self) -> int:
        with self._cond:
            return len(self._stuck)

    def _job_stuck(self, armed: Armed) -> None:
        """On the watchdog thread: file the job as failed, give its thread up, tell the launcher."""
        job, work = armed.job, armed.work
        error = JobTimeout(
            f"the job was stuck past its time limit of {armed.limit_s:g}s and the grace of "
            f"{self._settings.job_timeout_grace_s:g}s (a call no exception reaches); its process is replaced"
        )
        # As processor.py files a failure: the job's retry filters (code, read from the registered
        # job), and a job that keeps its result gets its error as one when it is failed for good.
        found = registered(str(job.get("class")))
        filing = retry.storable(
            retry.on_failure(job, error, options=found.options if found else None), work.raw
        )
        with self._cond:
            self._stuck.add(armed.tid)
            if self._running.pop(armed.tid, None) is not None and not armed.inject:
                self._async_running -= 1
            if armed.inject:
                self._concurrency -= 1  # a fixed pool: one job thread fewer from now on
            else:
                # Its slot is given up on with it (its task waits for good): one async slot fewer.
                self._async_capacity -= 1
            self._cond.notify_all()
        ttl = results.ttl_s(job)
        if ttl is not None and filing.dead:
            record = results.failure_record(filing.payload)
            jid = str(job.get("jid") or "")
            self._settler.after_result(
                work.raw, jid, record, ttl, lambda: self._settler.file(work.raw, filing, work.run_id)
            )
        else:
            self._settler.file(work.raw, filing, work.run_id)
        if filing.dead:
            try:
                record_failed(self._settler.client, self._settings.status_ttl_s, filing.payload)
            except Exception as exc:
                self._outages.report("Status", exc)
        elapsed = time.monotonic() - armed.started
        self.stats.failed += 1
        self.stats.jobs.add(work.queue, str(job.get("class")), elapsed, failed=True, dead=filing.dead)
        log.error(
            "job_stuck",
            jid=job.get("jid"),
            job=job.get("class"),
            queue=work.queue,
            limit_s=armed.limit_s,
            grace_s=self._settings.job_timeout_grace_s,
            elapsed_s=round(elapsed, 3),
            to="dead" if filing.dead else "retry",
            stack=armed.stack(),
            note="filed as failed with JobTimeout; this thread is given up on and the process replaced",
        )
        if self.on_stuck is not None:
            self.on_stuck(armed)
