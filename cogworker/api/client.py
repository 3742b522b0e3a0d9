"""Pushing jobs to Redis: one job, a job at a time, or many in one round trip per batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis
import structlog
from redis.commands.core import Script

from cogworker import codec
from cogworker.api import payload
from cogworker.api.middleware import compose_client_chain, run_client_chain
from cogworker.settings import Settings, load_settings
from cogworker.store import key_guard, keys, scripts

if TYPE_CHECKING:
    from cogworker.api.decorator import JobFunction

BULK_BATCH = 1000

_log = structlog.get_logger("cogworker.client")

# Guards only the assignments below. Nothing that runs code outside this module (loading settings,
# building a client) may run under it: `configure()` takes it, and anything called with it held could
# reach `configure()` again (a first push_bulk once hung forever that way).
_lock = threading.Lock()
_settings: Settings | None = None
_redis: redis.Redis | None = None


def configure(settings: Settings | None = None, client: redis.Redis | None = None) -> None:
    """Point the job API at a Redis. Without a call, the first push reads COGWORKER_* settings."""
    global _settings, _redis
    from cogworker.store.connection import connect

    new_settings = settings or load_settings()
    new_client = client or connect(new_settings)
    with _lock:
        _settings, _redis = new_settings, new_client


def reset_after_fork() -> None:
    """A forked child must not share its parent's sockets.

    The child runs one thread, and another thread of the parent may have held the lock when it
    forked (it would stay held here forever): the child gets a new lock instead of acquiring it."""
    global _lock, _redis
    _lock = threading.Lock()
    _redis = None


def settings() -> Settings:
    """The job API's settings: those given to `configure()`, else COGWORKER_* read on first use."""
    global _settings
    current = _settings
    if current is not None:
        return current
    loaded = load_settings()
    with _lock:
        if _settings is None:
            _settings = loaded
        return _settings


def connection() -> redis.Redis:
    """The job API's client, built from `settings()` on first use. Two threads arriving at once may
    each build one (building doesn't connect); the first assigned is the one both use."""
    global _redis
    current = _redis
    if current is not None:
        return current
    from cogworker.store.connection import connect

    built = connect(settings())
    with _lock:
        if _redis is None:
            _redis = built
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
    """Write one job. A key of the wrong type raises key_guard.WrongTypeKey, naming the key, when the
    job wasn't written; after it was (only the queue registry refused), the push stands."""
    conn = connection()
    at = job.get("at")
    if at is not None and at > time.time():
        try:
            conn.zadd(keys.SCHEDULE, {codec.dumps(job): at})
        except redis.ResponseError as exc:
            if key_guard.is_wrong_type(exc):
                raise key_guard.wrong_type_error(conn, keys.SCHEDULE) from exc
            raise
        return str(job["jid"])
    job.pop("at", None)
    job["enqueued_at"] = time.time()
    queue_key = keys.queue(job["queue"])
    pipe = conn.pipeline(transaction=False)
    pipe.lpush(queue_key, codec.dumps(job))
    pipe.sadd(keys.QUEUES, job["queue"])
    pipe.publish(keys.WAKE_CHANNEL, job["queue"])
    pushed, listed, woken = pipe.execute(raise_on_error=False)
    if isinstance(pushed, Exception):
        if key_guard.is_wrong_type(pushed):
            raise key_guard.wrong_type_error(conn, queue_key) from pushed
        raise pushed
    for key, reply in ((keys.QUEUES, listed), (keys.WAKE_CHANNEL, woken)):
        if isinstance(reply, Exception):
            # The job is on its queue, so the push stands (raising would have the caller push it
            # twice); only its queue's listing or the idle fetchers' wake-up is missing.
            if key_guard.is_wrong_type(reply):
                key_guard.request(conn, key)
            _log.error("push_bookkeeping_failed", key=key, jid=job["jid"], error=str(reply))
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

    options = fn.set(queue=queue).options if queue is not None else dict(fn.options)
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
    from cogworker.api.job_status import abandon as forget_statuses
    from cogworker.api.unique import abandon as free_claims

    free_claims(batch)
    forget_statuses(batch)


def _write_batch(conn: redis.Redis, batch: list[dict[str, Any]]) -> None:
    """Write a batch in one script (push_batch.lua): every job, or none when a key has the wrong
    type (then key_guard.WrongTypeKey names it)."""
    if not batch:
        return
    now = time.time()
    by_queue: dict[str, list[str]] = {}
    scheduled: list[Any] = []
    for job in batch:
        at = job.get("at")
        if at is not None and at > now:
            scheduled += [at, codec.dumps(job)]
        else:
            job.pop("at", None)
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(codec.dumps(job))
    args: list[Any] = [len(by_queue)]
    for name, raws in by_queue.items():
        args += [name, len(raws), *raws]
    args += [len(scheduled) // 2, *scheduled]
    reply = _push_batch_script(conn)(
        keys=[keys.QUEUES, keys.WAKE_CHANNEL, keys.SCHEDULE, *(keys.queue(n) for n in by_queue)],
        args=args,
        client=conn,
    )
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)


_push_batch: tuple[redis.Redis, Script] | None = None


def _push_batch_script(conn: redis.Redis) -> Script:
    """push_batch.lua registered with the job API's client (redis-py reloads it after NOSCRIPT)."""
    global _push_batch
    cached = _push_batch
    if cached is None or cached[0] is not conn:
        cached = (conn, conn.register_script(scripts.source("push_batch")))
        _push_batch = cached
    return cached[1]
