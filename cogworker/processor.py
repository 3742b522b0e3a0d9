"""Running one fetched job: decode, resolve, run through the server middleware, settle.

Nothing here may kill the job thread: an unreadable payload, a job that can't be imported and a
job that raises all end filed in retry or dead with their error.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from cogworker import codec, logs, retry
from cogworker.fetch import Work
from cogworker.jobs import resolve
from cogworker.jobstats import JobCounts
from cogworker.middleware import run_server_chain
from cogworker.settle import Settler

log = structlog.get_logger("cogworker.job")


class Stats:
    """This process's counters, reported to the supervisor and in the heartbeat."""

    __slots__ = ("failed", "jobs", "processed")

    def __init__(self) -> None:
        self.processed = 0
        self.failed = 0
        self.jobs = JobCounts()


def process(work: Work, settler: Settler, stats: Stats) -> None:
    job = codec.loads_dict(work.raw)
    if job is None or not isinstance(job.get("class"), str):
        reason = "payload is not a JSON object with a job class"
        settler.file(work.raw, retry.unreadable(work.raw, work.queue, reason))
        stats.failed += 1
        stats.jobs.add(work.queue, "cogworker.UnreadablePayload", 0.0, failed=True, dead=True)
        log.error("job_unreadable", queue=work.queue, payload=work.raw[:200])
        return
    jid = str(job.get("jid") or "")
    # Every line logged on this thread while the job runs (ours and the job's own) carries these.
    structlog.contextvars.bind_contextvars(jid=jid, job=job["class"], queue=work.queue)
    started = time.perf_counter()
    verbose = logs.enabled("info")
    if verbose:
        log.info("job_start")
    try:
        run_server_chain(job, lambda: _perform(job))
    except Exception as exc:
        filing = retry.on_failure(job, exc)
        settler.file(work.raw, filing)
        elapsed = time.perf_counter() - started
        stats.failed += 1
        stats.jobs.add(work.queue, job["class"], elapsed, failed=True, dead=filing.dead)
        log.warning(
            "job_fail",
            elapsed_ms=round(elapsed * 1000, 2),
            error=f"{filing.payload['error_class']}: {filing.payload['error_message'][:200]}",
            to="dead" if filing.dead else "retry",
            retry_count=filing.payload.get("retry_count"),
        )
    else:
        settler.ack(work.raw, jid)
        elapsed = time.perf_counter() - started
        stats.processed += 1
        stats.jobs.add(work.queue, job["class"], elapsed)
        if verbose:
            log.info("job_done", elapsed_ms=round(elapsed * 1000, 2))
    finally:
        structlog.contextvars.unbind_contextvars("jid", "job", "queue")


def _perform(job: dict[str, Any]) -> None:
    """Inside the server chain, so middleware sees a job that can't be imported fail like any other."""
    args = job.get("args", [])
    kwargs = job.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("payload args must be a list and kwargs an object")
    resolve(job["class"]).func(*args, **kwargs)
