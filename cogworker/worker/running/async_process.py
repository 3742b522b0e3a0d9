"""Running one fetched `async def` job on the worker's event loop: decode, the server middleware
(api/aio_server.py), the body, settle, all in the job's own task.

It is processor.py's `process`, step for step, awaited: the same expiry, cancel, time limit, retry,
dead, status, unique and result handling, the same counters and log lines. Only where a step needs
sync Redis work does the task await a thread for it: a filing in retry or dead, an unrun job's end,
a result, a chain step or a batch member's count (asyncio's default executor). A job that succeeds
with nothing else to settle is acknowledged on the loop (the ack rides on the next fetch), so no
thread is involved from its fetch to its acknowledgement, and its slot is free as soon as it ends.

A job whose rate limiter (`limit=`) must be held around its body is not run here: its limiter is a
sync context manager that talks to Redis, so the Manager runs it as `process` on a bridge thread
(`needs_a_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from cogworker import logs
from cogworker.api import aio_server, current_job, expiry, features, results, sidekiq_payload
from cogworker.api.current_job import CurrentJob
from cogworker.api.registry import RegisteredJob, resolve
from cogworker.api.time_limits import with_limit
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.async_loop import AsyncLoop
from cogworker.worker.running.processor import (
    Stats,
    _as_member,
    _end_unrun,
    _file_failure,
    _put_back,
    acked_alone,
    settle_success,
)
from cogworker.worker.running.time_limits import TimeLimits
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.job")


def needs_a_thread(found: RegisteredJob) -> bool:
    """The job's limiter is held around its body (a sync Redis context manager): run on a thread."""
    return found.options.get("limit") is not None


async def process_async(
    work: Work,
    job: dict[str, Any],
    settler: Settler,
    stats: Stats,
    *,
    allowed: tuple[str, ...],
    loop: AsyncLoop,
    limits: TimeLimits | None,
    slot: int,
) -> None:
    """Run one async job (`job`: its decoded payload) on the loop. `slot`: its key among the Manager's
    running jobs."""
    # Stored without an empty `kwargs` (api/payload.py `stored`): middleware sees the job as built.
    job.setdefault("kwargs", {})
    jid = str(job.get("jid") or "")
    # The task's own context: every line logged while the job runs (ours and its own) carries these.
    structlog.contextvars.bind_contextvars(jid=jid, job=job["class"], queue=work.queue)
    now = time.time()
    if stats.metrics is not None:
        stats.metrics.picked(work.queue, job.get("enqueued_at", job.get("created_at")), now)
    if expiry.expired(job, now):
        await asyncio.to_thread(
            _end_unrun, work, job, "expired", settler, stats, expires_at=job.get(expiry.EXPIRES_AT)
        )
        return
    started = time.perf_counter()
    verbose = logs.enabled("info")
    if verbose:
        log.info("job_start")
    features.ensure_installed()
    ttl = results.ttl_s(job)
    kept: list[str] | None = [] if ttl is not None else None
    current, begun = current_job.begin(jid, work.queue, job["class"])
    token: Any = begun

    async def perform() -> None:
        await _perform(job, work, allowed, current, kept, limits, owner, loop, slot)

    try:
        owner = settler.list_of(work.raw)
        await aio_server.run_chain(job, perform, loop.run_sync)
    except GeneratorExit:
        # The task was destroyed unfinished: a stop gave up on the job and the process is ending.
        # Nothing may be awaited or settled now (the stop's requeue puts the job back).
        token = None
        raise
    except current_job.JobCancelled:
        elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
        await asyncio.to_thread(_end_unrun, work, job, "cancelled", settler, stats, elapsed_ms=elapsed_ms)
    except BaseException as exc:  # the job's own, as in `process`: filed, never the task's end
        if not (
            getattr(exc, "cogworker_reschedule", False)
            and await asyncio.to_thread(_put_back, work, job, exc, settler, stats)
        ):
            elapsed = time.perf_counter() - started
            await asyncio.to_thread(_file_failure, work, job, exc, settler, stats, elapsed, ttl)
    else:
        if acked_alone(job, kept):
            settler.ack(work.raw, jid)
        else:
            await asyncio.to_thread(settle_success, settler, work, job, kept, ttl)
        elapsed = time.perf_counter() - started
        stats.processed += 1
        stats.jobs.add(work.queue, job["class"], elapsed)
        if verbose:
            log.info("job_done", elapsed_ms=round(elapsed * 1000, 2))
    finally:
        if token is not None:
            current_job.end(current, token)


async def _perform(
    job: dict[str, Any],
    work: Work,
    allowed: tuple[str, ...],
    current: CurrentJob,
    kept: list[str] | None,
    limits: TimeLimits | None,
    owner: str,
    loop: AsyncLoop,
    slot: int,
) -> None:
    """processor._perform, inside the chain: a job that can't be imported fails here, seen by the
    middleware like any other failure."""
    current.raise_if_cancelled()
    args = job.get("args", [])
    kwargs = job.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("payload args must be a list and kwargs an object")
    found = resolve(job["class"], allowed=allowed)
    if found.typed is not None:
        args, kwargs = found.typed.load(args, kwargs)
    own = "bid" in job and sidekiq_payload.own_batch(job)  # a foreign (Sidekiq Pro) bid is opaque
    member = _as_member(job, owner) if own else contextlib.nullcontext()
    with member:  # cogworker.current_batch() is the member's batch (a contextvar: the body's too)
        coro = found.func(*args, **kwargs)
        limit = limits.limit_for(job) if limits is not None else None
        if limit is None or limits is None:
            value = await loop.run_here(coro, job, work.queue)
        else:
            limited = with_limit(coro, limit)
            value = await limits.call_async(
                limit, work, job, slot, lambda: loop.run_here(limited, job, work.queue)
            )
    if kept is not None:
        kept.append(results.success_record(found.name, value))
