"""Pushing jobs to Redis: one job, a job at a time, or many in one round trip per batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from cogworker import codec, keys, payload
from cogworker.middleware import compose_client_chain, run_client_chain
from cogworker.settings import Settings, load_settings

if TYPE_CHECKING:
    from cogworker.jobs import JobFunction

BULK_BATCH = 1000

_lock = threading.Lock()
_settings: Settings | None = None
_redis: redis.Redis | None = None


def configure(settings: Settings | None = None, client: redis.Redis | None = None) -> None:
    """Point the job API at a Redis. Without a call, the first push reads COGWORKER_* settings."""
    global _settings, _redis
    from cogworker.connection import connect

    with _lock:
        _settings = settings or load_settings()
        _redis = client or connect(_settings)


def reset_after_fork() -> None:
    """A forked child must not share its parent's sockets."""
    global _redis
    with _lock:
        _redis = None


def settings() -> Settings:
    if _settings is None:
        configure()
    assert _settings is not None
    return _settings


def connection() -> redis.Redis:
    global _redis
    if _redis is None:
        from cogworker.connection import connect

        with _lock:
            if _redis is None:
                _redis = connect(settings())
    return _redis


def build_job(
    fn: JobFunction, args: Sequence[Any], kwargs: dict[str, Any], options: dict[str, Any], at: float | None
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for key in ("unique", "unique_for", "status", "backtrace"):
        if options.get(key) is not None:
            extra[key] = options[key]
    if at is not None and at > time.time():
        extra["at"] = at
    return payload.build(
        fn.name,
        tuple(args),
        dict(kwargs),
        queue=str(options.get("queue") or fn.queue),
        retry=options.get("retry", True),
        extra=extra,
    )


def push(
    fn: JobFunction,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    at: float | None = None,
    options: dict[str, Any] | None = None,
) -> str | None:
    """Push one job; returns its jid, or None when a client middleware stopped the push."""
    job = build_job(fn, args, kwargs, options or fn.options, at)
    from cogworker import testing

    push_step = testing.record if testing.mode is not None else _write_one
    jid: str | None = run_client_chain(job, push_step)
    return jid


def _write_one(job: dict[str, Any]) -> str:
    conn = connection()
    at = job.get("at")
    if at is not None and at > time.time():
        conn.zadd(keys.SCHEDULE, {codec.dumps(job): at})
    else:
        job.pop("at", None)
        job["enqueued_at"] = time.time()
        pipe = conn.pipeline(transaction=False)
        pipe.lpush(keys.queue(job["queue"]), codec.dumps(job))
        pipe.sadd(keys.QUEUES, job["queue"])
        pipe.publish(keys.WAKE_CHANNEL, job["queue"])
        pipe.execute()
    return str(job["jid"])


def push_bulk(
    fn: JobFunction,
    arg_lists: Iterable[Sequence[Any]],
    *,
    at: float | None = None,
    queue: str | None = None,
) -> list[str | None]:
    """Push one job per argument tuple; one round trip per batch of up to 1,000 jobs.

    Every argument is checked before anything is written, so a bad one pushes nothing. Returns
    the jids in order (None where a client middleware stopped that job).
    """
    from cogworker import testing

    options = dict(fn.options)
    if queue is not None:
        options["queue"] = queue
    jobs = [build_job(fn, tuple(args), {}, options, at) for args in arg_lists]
    if testing.mode is not None:
        return [run_client_chain(job, testing.record) for job in jobs]
    conn = connection()
    jids: list[str | None] = []
    for start in range(0, len(jobs), BULK_BATCH):
        batch: list[dict[str, Any]] = []

        def collect(job: dict[str, Any], batch: list[dict[str, Any]] = batch) -> str:
            batch.append(job)
            return str(job["jid"])

        chain = compose_client_chain(collect)
        for job in jobs[start : start + BULK_BATCH]:
            jids.append(chain(job))
        try:
            _write_batch(conn, batch)
        except Exception:
            _abandon(batch)
            raise
    return jids


def _abandon(batch: list[dict[str, Any]]) -> None:
    """A batch that went through the client chain but wasn't written: give back what the chain took
    for it (unique claims, "queued" statuses), or a retried push_bulk would find every job a
    duplicate of one that was never pushed."""
    from cogworker.status import abandon as forget_statuses
    from cogworker.unique import abandon as free_claims

    free_claims(batch)
    forget_statuses(batch)


def _write_batch(conn: redis.Redis, batch: list[dict[str, Any]]) -> None:
    if not batch:
        return
    now = time.time()
    by_queue: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for job in batch:
        at = job.get("at")
        if at is not None and at > now:
            scheduled[codec.dumps(job)] = at
        else:
            job.pop("at", None)
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(codec.dumps(job))
    pipe = conn.pipeline(transaction=False)
    for name, raws in by_queue.items():
        pipe.lpush(keys.queue(name), *raws)
        pipe.sadd(keys.QUEUES, name)
        pipe.publish(keys.WAKE_CHANNEL, name)
    if scheduled:
        pipe.zadd(keys.SCHEDULE, scheduled)
    pipe.execute()
