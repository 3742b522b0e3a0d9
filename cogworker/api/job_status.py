"""Job status: `cogworker.status(jid)` -> "queued", "working", "retrying", "complete", "failed",
"cancelled", "expired", "limited", or None.

Opt-in, because it costs a write per state change on the hot path: a job records its status when it
has `@job(status=True)` (or `.set(status=True)`), or for every job when `COGWORKER_STATUS_ALL=true`
— with `@job(status=False)` still opting one job out. The decision is made at push time and carried
in the payload (`"status": true`), so workers follow what the pushing side chose.

The status lives in a hash `cogworker:status:<jid>` (status, class, queue, updated_at, and the error
of the last failure) that expires `status_ttl_s` after its last change — later for a job that is
scheduled or waiting for a retry, by how long it waits, so a status doesn't vanish while its job is
simply not due yet. Unknown and expired jids read as None — and so does a job still running
`status_ttl_s` after it started (the TTL is counted from the last change, not renewed while it runs).

- queued: written at push, before the job is written (written after, a fast worker's "working"
  could be overwritten); removed again if the push doesn't happen.
- working / complete / retrying / failed: written around the job's run by the server middleware;
  "failed" when the failure sends it to dead, "retrying" when it goes to the retry set.
- cancelled: the job ended with JobCancelled, or `cogworker.cancel` took it off its queue or set.
- expired: a worker found it past its `expires_in` and did not run it (`record_unrun`).
- limited: a full rate limiter put it back in the schedule set (api/limit_jobs.py), with the
  limiter's name (`limiter`) and how long it has been put back in all (`waited_s`).

Every write is best-effort: a Redis error while writing a status never fails a push or a job, and it
is logged once per outage. A job filed in dead outside the chain -- a poison pill, whose process died
while running it -- becomes "failed" too, written by orphan recovery (`record_failed`).

Testing modes (cogworker.testing): nothing is written and `status()` answers None without Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import redis

from cogworker.api import client
from cogworker.api.current_job import JobCancelled
from cogworker.api.middleware import ClientNext, ServerNext
from cogworker.api.payload import DEFAULT_RETRIES, error_fields, retry_count, terminal_failure
from cogworker.api.push_outcome import may_be_queued
from cogworker.api.retry import longest_backoff_s
from cogworker.store import key_guard, keys
from cogworker.store.outage import Outages

STATES = ("queued", "working", "retrying", "complete", "failed", "cancelled", "expired")

_outages = Outages()
COMPONENT = "Status"

# The job option this feature reads from a payload, with the check `@job(...)` runs on it (none:
# only `True` turns tracking on, anything else leaves it off).
OPTIONS: dict[str, Callable[[Any], None] | None] = {"status": None}


def status(jid: str) -> str | None:
    """Return a job's status, when it tracks one (`@job(status=True)` or COGWORKER_STATUS_ALL).

    Args:
        jid: The job's id, as its push returned it.

    Returns:
        "queued", "working", "retrying", "complete", "failed", "cancelled", "expired" or "limited";
        None for a job that tracks none, an unknown or expired jid, and in the testing modes.

    Raises:
        redis.RedisError: Redis could not be read.

    Example:
        >>> cogworker.status(jid)  # doctest: +SKIP
        'working'
    """
    if not client.redis_in_use():
        return None
    value = client.connection().hget(keys.status(jid), "status")
    return str(value) if value is not None else None


def details(jid: str) -> dict[str, str] | None:
    """Everything recorded for the jid (status, class, queue, updated_at, error_*), or None."""
    if not client.redis_in_use():
        return None
    found: dict[str, str] = client.connection().hgetall(keys.status(jid))  # type: ignore[assignment]
    return found or None


def tracked(job: dict[str, Any]) -> bool:
    return job.get("status") is True


def _write(job: dict[str, Any], state: str, extra_ttl_s: float = 0.0, **fields: str) -> None:
    try:
        _write_to(client.connection(), client.settings().status_ttl_s, job, state, extra_ttl_s, fields)
    except Exception as exc:
        _outages.report(COMPONENT, exc)
    else:
        _outages.recovered(COMPONENT)


def _write_to(
    conn: redis.Redis,
    ttl_s: float,
    job: dict[str, Any],
    state: str,
    extra_ttl_s: float = 0.0,
    fields: dict[str, str] | None = None,
) -> None:
    ttl_ms = int((ttl_s + max(0.0, extra_ttl_s)) * 1000)
    key = keys.status(str(job["jid"]))
    mapping: dict[str | bytes, str] = {
        "status": state,
        "class": str(job.get("class")),
        "queue": str(job.get("queue")),
        "updated_at": repr(time.time()),
    }
    mapping.update(fields or {})
    pipe = conn.pipeline(transaction=False)
    pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
    pipe.pexpire(key, max(1, ttl_ms))
    try:
        pipe.execute()
    except redis.ResponseError as exc:
        if key_guard.is_wrong_type(exc):
            key_guard.request(conn, key)
        raise


def _limited(job: dict[str, Any], exc: BaseException) -> bool:
    """A full rate limiter puts the job back (api/limit_jobs.py): "limited", with the limiter and
    how long it has waited. False once it waited too long (a failure, written as one)."""
    from cogworker.api import limit_jobs

    now = time.time()
    if not limit_jobs.puts_back(job, exc, now):
        return False
    by = str(getattr(exc, "limiter_name", "?"))
    _write(
        job,
        "limited",
        limit_jobs.backoff_bound_s(exc),
        limiter=by,
        waited_s=f"{limit_jobs.waited_s(job, now):.1f}",
    )
    return True


def record_failed(conn: redis.Redis, ttl_s: float, job: dict[str, Any]) -> None:
    """A tracked job filed in dead outside the server chain (a poison pill): "failed", with the
    error it was filed with. Raises on a Redis error (the caller retries or reports it)."""
    if not tracked(job) or not job.get("jid"):
        return
    error = {
        name: str(job[name])[:1000]
        for name in ("error_class", "error_message")
        if isinstance(job.get(name), str)
    }
    _write_to(conn, ttl_s, job, "failed", 0.0, error)


def record_unrun(job: dict[str, Any], state: str) -> None:
    """A tracked job a worker ended without running it (`state`: "expired"). Best-effort, as every
    status write is."""
    if client.redis_in_use() and tracked(job) and job.get("jid"):
        _write(job, state)


def _forget(jobs: Iterable[dict[str, Any]]) -> None:
    names = [keys.status(str(job["jid"])) for job in jobs]
    if not names:
        return
    try:
        client.connection().delete(*names)
    except Exception as exc:
        _outages.report(COMPONENT, exc)


def on_push(job: dict[str, Any], call_next: ClientNext) -> Any:
    """Client middleware: decide whether the job is tracked; write "queued" before it is pushed."""
    if not client.redis_in_use():
        return call_next(job)
    if "status" not in job and client.settings().status_all:
        job["status"] = True
    if not tracked(job):
        return call_next(job)
    at = job.get("at")
    _write(job, "queued", float(at) - time.time() if isinstance(at, int | float) else 0.0)
    try:
        pushed = call_next(job)
    except BaseException as exc:
        if not may_be_queued(exc):  # queued, or it may be: "queued" stays
            _forget([job])
        raise
    if pushed is None:
        _forget([job])
    return pushed


def abandon(jobs: Iterable[dict[str, Any]]) -> None:
    """Forget "queued" for jobs that went through the chain but were never written (push_bulk)."""
    if client.redis_in_use():
        _forget(job for job in jobs if tracked(job))


def _retry_wait_bound_s(job: dict[str, Any]) -> float:
    """The longest the job can wait for its next try."""
    previous = retry_count(job)  # never raises: a payload's retry_count may be anything
    return longest_backoff_s(previous + 1 if previous is not None else 0)


def on_run(job: dict[str, Any], call_next: ServerNext) -> None:
    """Server middleware: "working" around the run, then "complete", "retrying" or "failed"."""
    if not client.redis_in_use() or not tracked(job):
        call_next()
        return
    _write(job, "working")
    try:
        call_next()
    except JobCancelled:
        _write(job, "cancelled")
        raise
    except BaseException as exc:  # a job's SystemExit is a failure too (worker/running/processor.py files it)
        if getattr(exc, "cogworker_reschedule", False) and _limited(job, exc):
            raise
        error = error_fields(exc)
        error["error_message"] = error["error_message"][:1000]
        if terminal_failure(job, DEFAULT_RETRIES):
            _write(job, "failed", **error)
        else:
            _write(job, "retrying", _retry_wait_bound_s(job), **error)
        raise
    _write(job, "complete")
