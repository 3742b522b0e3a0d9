"""Running one fetched job: decode, resolve, run through the server middleware, settle.

An `async def` job runs on the worker's event loop instead, middleware and settling included
(worker/running/async_process.py, which shares this module's filing and settling). One with a rate
limiter takes this path on a bridge thread: only its body is handed to the loop (`run_async`,
worker/running/async_loop.py) and waited for. A sync job that returns an awaitable fails with
TypeError (api/async_jobs.py).

Nothing here may kill the job thread: an unreadable payload (not JSON, not UTF-8), a job that can't
be imported, a job that raises anything (SystemExit and KeyboardInterrupt too) and a payload with odd
field values all end filed in retry or dead with their error. A job ending with JobCancelled
(cogworker.cancel) is acknowledged and counted cancelled instead (`_end_unrun`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from cogworker import codec, logs
from cogworker.api import current_job, expiry, features, job_status, results, retry, sidekiq_payload
from cogworker.api.async_jobs import check_result, run_to_completion
from cogworker.api.current_job import CurrentJob
from cogworker.api.middleware import run_server_chain
from cogworker.api.registry import RegisteredJob, registered, resolve
from cogworker.api.time_limits import with_limit
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.metrics.recorder import Recorder
from cogworker.worker.running.time_limits import TimeLimits
from cogworker.worker.settling.job_stats import JobCounts
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.job")


class Stats:
    """This process's counters, reported to the supervisor and in the heartbeat."""

    __slots__ = ("failed", "jobs", "metrics", "processed")

    def __init__(self, metrics: Recorder | None = None) -> None:
        self.processed = 0
        self.failed = 0
        # Per-class metrics in Redis (COGWORKER_METRICS): runs counted with `jobs`, pickups here.
        self.metrics = metrics
        self.jobs = JobCounts(metrics)


# Runs an async job's coroutine to its end and returns (or raises) its outcome: (coroutine, job, queue).
RunAsync = Callable[[Coroutine[Any, Any, Any], dict[str, Any], str], Any]


def _run_alone(coro: Coroutine[Any, Any, Any], job: dict[str, Any], queue: str) -> Any:
    return run_to_completion(coro)


def process(
    work: Work,
    settler: Settler,
    stats: Stats,
    *,
    allowed: tuple[str, ...],
    run_async: RunAsync = _run_alone,
    limits: TimeLimits | None = None,
    slot: int | None = None,
) -> None:
    """Run one job. `allowed`: the modules (COGWORKER_REQUIRE) whose jobs may be imported on demand;
    `run_async`: how an `async def` job's coroutine is run (the worker's event loop); `limits`: the
    worker's time-limit watchdog (time_limits.py); `slot`: the job's key among the Manager's running
    jobs when that is not this thread's ident (an async job on a bridge thread)."""
    job = codec.loads_dict(work.raw)
    if job is None or not isinstance(job.get("class"), str):
        _file_unreadable(work, settler, stats)
        return
    # Stored without an empty `kwargs` (api/payload.py `stored`): middleware sees the job as built.
    job.setdefault("kwargs", {})
    jid = str(job.get("jid") or "")
    # Every line logged on this thread while the job runs (ours and the job's own) carries these.
    structlog.contextvars.bind_contextvars(jid=jid, job=job["class"], queue=work.queue)
    now = time.time()
    if stats.metrics is not None:
        stats.metrics.picked(work.queue, job.get("enqueued_at", job.get("created_at")), now)
    if expiry.expired(job, now):
        _end_unrun(work, job, "expired", settler, stats, expires_at=job.get(expiry.EXPIRES_AT))
        structlog.contextvars.unbind_contextvars("jid", "job", "queue")
        return
    started = time.perf_counter()
    verbose = logs.enabled("info")
    if verbose:
        log.info("job_start")
    features.ensure_installed()
    # A job that keeps its result (api/results.py): the body's record, made inside the chain.
    ttl = results.ttl_s(job)
    kept: list[str] | None = [] if ttl is not None else None
    # cogworker.current_job(); a cancel this process knows of, or learns of while it runs, flags it.
    current, token = current_job.begin(jid, work.queue, job["class"])
    try:
        owner = settler.list_of(work.raw)
        run_server_chain(
            job, lambda: _perform(job, work, allowed, run_async, current, kept, limits, owner, slot)
        )
    except current_job.JobCancelled:
        elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
        _end_unrun(work, job, "cancelled", settler, stats, elapsed_ms=elapsed_ms)
    except BaseException as exc:
        # BaseException too: a job's SystemExit or KeyboardInterrupt is its failure, not the
        # thread's end. Left to escape, it would leave the job in progress and the thread dead.
        # A full rate limiter's OverLimit puts the job back instead (api/limit_jobs.py).
        if not (getattr(exc, "cogworker_reschedule", False) and _put_back(work, job, exc, settler, stats)):
            _file_failure(work, job, exc, settler, stats, time.perf_counter() - started, ttl)
    else:
        settle_success(settler, work, job, kept, ttl)
        elapsed = time.perf_counter() - started
        stats.processed += 1
        stats.jobs.add(work.queue, job["class"], elapsed)
        if verbose:
            log.info("job_done", elapsed_ms=round(elapsed * 1000, 2))
    finally:
        current_job.end(current, token)
        structlog.contextvars.unbind_contextvars("jid", "job", "queue")


def acked_alone(job: dict[str, Any], kept: list[str] | None) -> bool:
    """A succeeded job whose settle is only its acknowledgement (queued for the next fetch, no
    Redis round trip of its own): no chain step, no result to write, no batch to count it in."""
    # Inline, not a call (every job asks): a foreign `bid` (Sidekiq Pro's, in the Sidekiq mode) is
    # opaque, only looked at when there is a `bid` at all (api/sidekiq_payload.py).
    return (
        "chain" not in job
        and not kept
        and "bcb" not in job
        and not ("bid" in job and sidekiq_payload.own_batch(job))
    )


def settle_success(
    settler: Settler, work: Work, job: dict[str, Any], kept: list[str] | None, ttl: float | None
) -> None:
    jid = str(job.get("jid") or "")
    if "chain" in job:  # a chain step: acked with its successor's push (worker/settling/chain_step.py)
        _chain_step_done(settler, work, job, kept[0] if kept else None, ttl)
    elif ttl is not None and kept:
        settler.after_result(work.raw, jid, kept[0], ttl, lambda: _ack(settler, work.raw, job))
    elif "bcb" in job or ("bid" in job and sidekiq_payload.own_batch(job)):
        settler.ack_member(work.raw, job)  # acked with its count in its batch (api/batch.py)
    else:
        settler.ack(work.raw, jid)


def _chain_step_done(
    settler: Settler, work: Work, job: dict[str, Any], record: str | None, ttl: float | None
) -> None:
    from cogworker.worker.settling import chain_step  # imported by the first chain step, never at start

    chain_step.succeeded(settler, work, job, record, ttl)


def _ack(settler: Settler, raw: str, job: dict[str, Any]) -> None:
    if sidekiq_payload.batch_member(job):
        settler.ack_member(raw, job)
    else:
        settler.ack(raw, str(job.get("jid") or ""))


def _end_unrun(
    work: Work, job: dict[str, Any], outcome: str, settler: Settler, stats: Stats, **why: Any
) -> None:
    """A job that ends without running (keys.ENDED_UNRUN): counted, logged once, its status and locks
    settled, acknowledged. No middleware sees it: it never started. A job that keeps its result gets
    its end as one (`cogworker.JobExpired`...), so a waiter learns of it rather than timing out.
    Status, log line and per-job count come first, the Redis count and acknowledgement last: once
    the job is counted, everything else about its end is already there to read."""
    job_status.record_unrun(job, outcome)
    stats.jobs.ended_unrun(work.queue, job["class"], outcome)
    log.warning(f"job_{outcome}", **why)
    ttl = results.ttl_s(job)
    if ttl is None:
        settler.end_unrun(work.raw, job, outcome)
    else:
        error = {"error_class": f"cogworker.Job{outcome.capitalize()}", "error_message": f"job {outcome}"}
        if outcome == "expired":
            error["error_message"] = f"not started before its expires_at ({why.get('expires_at')})"
        elif outcome == "cancelled":
            error["error_message"] = "cancelled by cogworker.cancel"
        jid = str(job.get("jid") or "")
        record = results.failure_record(error)
        settler.after_result(work.raw, jid, record, ttl, lambda: settler.end_unrun(work.raw, job, outcome))


def _put_back(work: Work, job: dict[str, Any], exc: BaseException, settler: Settler, stats: Stats) -> bool:
    """A job its rate limiter turned away: filed in the schedule set (counted `limited`, not failed,
    its retry count untouched). False once it has waited its limiter's max wait: then it fails."""
    from cogworker.api import limit_jobs  # only here: a worker whose jobs use no limiter never loads it

    now = time.time()
    if not limit_jobs.puts_back(job, exc, now):
        limit_jobs.gave_up(job, exc, now)
        return False
    filing = limit_jobs.put_back(job, exc, now)
    settler.file(work.raw, filing, work.run_id)
    stats.jobs.ended_unrun(work.queue, job["class"], "limited")
    log.info(
        "job_limited",
        limiter=filing.payload[limit_jobs.BY],
        times=filing.payload[limit_jobs.COUNT],
        retry_in_s=round(filing.score - now, 3),
    )
    return True


def _file_unreadable(work: Work, settler: Settler, stats: Stats) -> None:
    filing = retry.unreadable(work.raw, work.queue, retry.unreadable_reason(work.raw))
    settler.file(work.raw, filing, work.run_id)
    stats.failed += 1
    stats.jobs.add(work.queue, "cogworker.UnreadablePayload", 0.0, failed=True, dead=True)
    log.error(
        "job_unreadable",
        queue=work.queue,
        reason=filing.payload["error_message"],
        payload=codec.escape(work.raw[:200]),
    )


def _file_failure(
    work: Work,
    job: dict[str, Any],
    exc: BaseException,
    settler: Settler,
    stats: Stats,
    elapsed: float,
    result_ttl: float | None = None,
) -> None:
    # Encoded here, before the log line says where it goes: a payload that had to be sanitised for
    # storing may be redirected to dead (retry.storable).
    # The job's retry filters (retry_on, discard_on, retry_in) are code, never in the payload: read
    # from the job as registered here (resolved by the run that failed, if it could be).
    found = registered(job["class"])
    filing = retry.storable(retry.on_failure(job, exc, options=found.options if found else None), work.raw)
    if result_ttl is not None and filing.dead:
        # Failed for good: its error is the result (a failure that will be retried writes none).
        record = results.failure_record(filing.payload)
        jid = str(job.get("jid") or "")
        settler.after_result(
            work.raw, jid, record, result_ttl, lambda: settler.file(work.raw, filing, work.run_id)
        )
    else:
        settler.file(work.raw, filing, work.run_id)
    if filing.dead and "chain" in job:
        from cogworker.worker.settling import chain_step

        chain_step.died(settler.client, job, filing.payload)
    stats.failed += 1
    stats.jobs.add(work.queue, job["class"], elapsed, failed=True, dead=filing.dead)
    log.warning(
        "job_discarded" if filing.discarded else "job_fail",
        elapsed_ms=round(elapsed * 1000, 2),
        error=f"{filing.payload['error_class']}: {filing.payload['error_message'][:200]}",
        to=_where(filing),
        retry_count=filing.payload.get("retry_count"),
        notes=filing.payload.get(retry.NOTES),
        # Its traceback: printed under the line by the console renderer, `exception` in JSON.
        exc_info=exc,
    )


def _where(filing: retry.Filing) -> str:
    if filing.discarded:  # retry: false or dead: false in the Sidekiq mode (api/sidekiq_payload.py)
        return "discarded"
    return "dead" if filing.dead else "retry"


def _perform(
    job: dict[str, Any],
    work: Work,
    allowed: tuple[str, ...],
    run_async: RunAsync,
    current: CurrentJob,
    kept: list[str] | None,
    limits: TimeLimits | None,
    owner: str,
    slot: int | None = None,
) -> None:
    """Inside the server chain, so middleware sees a job that can't be imported fail like any other
    (and an async job's coroutine is created, and run, in the context the middleware set up).
    `kept`: where the result's record goes, for a job that keeps one; a return value JSON can't
    hold is then the job's failure."""
    current.raise_if_cancelled()  # cancelled before it started (fetched again after a crash, say)
    args = job.get("args", [])
    kwargs = job.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("payload args must be a list and kwargs an object")
    found = resolve(job["class"], allowed=allowed)
    if found.typed is not None:
        args, kwargs = found.typed.load(args, kwargs)
    # Only a batch member loads batches, only a limited job the limiters (api/batch.py,
    # api/limit_jobs.py: passed before the body, held around it).
    own = "bid" in job and sidekiq_payload.own_batch(job)  # a foreign (Sidekiq Pro) bid is opaque
    member = _as_member(job, owner) if own else contextlib.nullcontext()
    limit = found.options.get("limit")
    held = _limiter_for(limit, args, kwargs) if limit is not None else contextlib.nullcontext()
    with member, held:  # cogworker.current_batch() is the member's batch
        value = _call(found, args, kwargs, job, work, run_async, limits, slot)
    if kept is not None:
        kept.append(results.success_record(found.name, value))


def _call(
    found: RegisteredJob,
    args: list[Any],
    kwargs: dict[str, Any],
    job: dict[str, Any],
    work: Work,
    run_async: RunAsync,
    limits: TimeLimits | None,
    slot: int | None = None,
) -> Any:
    """The job's own call, under its time limit if it has one (time_limits.py): armed around this
    call only, never around middleware or settling."""
    limit = limits.limit_for(job) if limits is not None else None
    queue = work.queue
    if found.is_async:
        coro = found.func(*args, **kwargs)
        if limit is None or limits is None:
            return run_async(coro, job, queue)
        limited = with_limit(coro, limit)
        return limits.call(limit, work, job, lambda: run_async(limited, job, queue), inject=False, slot=slot)
    if limit is None or limits is None:
        value = found.func(*args, **kwargs)
    else:
        value = limits.call(limit, work, job, lambda: found.func(*args, **kwargs), inject=True)
    check_result(found.name, value)
    return value


def _as_member(job: dict[str, Any], owner: str) -> contextlib.AbstractContextManager[Any]:
    """The member's batch for `current_batch()`; a block on it holds it for this run, owned by
    `owner` (this process's in-progress list, which recovery requeues the run from)."""
    from cogworker.api.batch import as_member

    return as_member(job, owner)


def _limiter_for(
    limit: Any, args: list[Any], kwargs: dict[str, Any]
) -> contextlib.AbstractContextManager[Any]:
    from cogworker.api import limit_jobs

    return limit_jobs.limiter_for(limit, args, kwargs)
