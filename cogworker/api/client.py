"""Pushing jobs to Redis: one job, or many in one round trip per batch.

The client knows job names, queues and payload options, not the `@job` decorator or the features
built on the middleware chains. A testing mode replaces the last step of a push (writing to Redis)
with its own through `install_push_step`, as Sidekiq's testing client is prepended to its client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
import structlog
from redis.commands.core import Script

from cogworker import codec
from cogworker.api import middleware, payload
from cogworker.api.middleware import abandon, compose_client_chain, run_client_chain
from cogworker.api.retry_filters import WORKER_SIDE
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard, keys, replicas, scripts
from cogworker.store.connection import connect

BULK_BATCH = 1000

_log = structlog.get_logger("cogworker.client")

# Guards only the assignments below. Nothing that runs code outside this module (loading settings,
# building a client) may run under it: `configure()` takes it, and anything called with it held could
# reach `configure()` again (a first push_bulk once hung forever that way).
_lock = threading.Lock()
_settings: SettingsFields | None = None
_redis: redis.Redis | None = None

PushStep = Callable[[dict[str, Any]], str]
# What a testing mode put in place of the write to Redis, or None.
_push_step: PushStep | None = None


def configure(settings: SettingsFields | None = None, client: redis.Redis | None = None) -> None:
    """Point the job API at a Redis. Without a call, the first push reads COGWORKER_* settings."""
    global _settings, _redis
    new_settings = settings or _from_environment()
    # The prefix is the process's, not the client's: a worker's own keys and its jobs' pushes must agree.
    keys.use_prefix(new_settings.key_prefix)
    new_client = client or connect(new_settings)
    with _lock:
        _settings, _redis = new_settings, new_client


def close() -> None:
    """Disconnect the job API's client and its pool (an app shutting down: the FastAPI lifespan helper,
    cogworker/contrib/fastapi.py). The settings stay; the next push connects again."""
    global _redis
    with _lock:
        conn, _redis = _redis, None
    if conn is not None:
        conn.close()
        pool = getattr(conn, "connection_pool", None)
        if pool is not None:  # a pool the client was given isn't closed by close()
            pool.disconnect()


def reset_after_fork() -> None:
    """A forked child must not share its parent's sockets.

    The child runs one thread, and another thread of the parent may have held the lock when it
    forked (it would stay held here forever): the child gets a new lock instead of acquiring it."""
    global _lock, _redis
    _lock = threading.Lock()
    _redis = None


def settings() -> SettingsFields:
    """The job API's settings: those given to `configure()`, else COGWORKER_* read on first use."""
    global _settings
    current = _settings
    if current is not None:
        return current
    loaded = _from_environment()
    with _lock:
        if _settings is None:
            _settings = loaded
            # Outside `configure()` this is the first use (a push configured only by COGWORKER_*):
            # its keys must carry the configured prefix from the first one. Under the lock, so no
            # thread sees these settings before their prefix; use_prefix only rebinds names, so it
            # can't reach `configure()`.
            keys.use_prefix(loaded.key_prefix)
        return _settings


def _from_environment() -> SettingsFields:
    # Imported here: a swarm's worker is configured with settings checked before it was forked and
    # never imports pydantic for them (settings_fields.py says why).
    from cogworker.settings import load_settings

    return load_settings()


def connection() -> redis.Redis:
    """The job API's client, built from `settings()` on first use. Two threads arriving at once may
    each build one (building doesn't connect); the first assigned is the one both use."""
    global _redis
    current = _redis
    if current is not None:
        return current
    built = connect(settings())
    with _lock:
        if _redis is None:
            _redis = built
        return _redis


def install_push_step(step: PushStep | None) -> None:
    """Replace the write to Redis at the end of every push with `step` (None: write to Redis again)."""
    global _push_step
    _push_step = step


def redis_in_use() -> bool:
    """False while a testing mode stands in for Redis: features then neither write nor read it."""
    return _push_step is None


def build_job(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    queue: str,
    options: dict[str, Any],
    at: float | None,
) -> dict[str, Any]:
    """The payload: `options` that are set (retry, and those of features: unique, status...) ride
    in it for the workers and the middleware; the retry filters, which are code, never do (a worker
    reads them from the registered job: retry_filters.py)."""
    extra = {
        key: value
        for key, value in options.items()
        if key not in ("queue", "retry") and key not in WORKER_SIDE and value is not None
    }
    if at is not None and at > time.time():
        extra["at"] = at
    default_ttl = settings().result_ttl_s
    if default_ttl is not None and "result_ttl" not in extra:
        # COGWORKER_RESULT_TTL_S: decided at push, like status_all (api/results.py).
        extra["result_ttl"] = default_ttl
    return payload.build(
        name, tuple(args), dict(kwargs), queue=queue, retry=options.get("retry", True), extra=extra
    )


def push(
    name: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    queue: str,
    options: dict[str, Any],
    at: float | None = None,
) -> str | None:
    """Push one job; returns its jid, or None when a client middleware stopped the push."""
    return send(build_job(name, args, kwargs, queue=queue, options=options, at=at))


def send(job: dict[str, Any]) -> str | None:
    """Push a payload `build_job` made: through the client middleware, then to Redis (or the testing
    mode's step). Split from `push` so a payload can be built (its arguments checked, its jid known)
    now and sent later: after a database transaction commits (cogworker/contrib/django/transaction.py)."""
    deferral = _deferral
    return send_now(job) if deferral is None else deferral(job, send_now)


def send_now(job: dict[str, Any]) -> str | None:
    """`send`, never deferred."""
    jid: str | None = run_client_chain(job, _push_step or _write_one)
    return jid


SendNow = Callable[[dict[str, Any]], str | None]
# Decides when a push is sent: given the payload and `send_now`, sends it now or arranges to later
# (returning its jid). Django's transaction-aware pushes install one; None: every push is sent now.
Deferral = Callable[[dict[str, Any], SendNow], str | None]
_deferral: Deferral | None = None


def install_deferral(deferral: Deferral | None) -> None:
    """Route every `send` (each perform_async/in/at; not push_bulk) through `deferral` (None: no more)."""
    global _deferral
    _deferral = deferral


def _write_one(job: dict[str, Any]) -> str:
    if not middleware.before_write_hooks:
        return _write_job(job)
    undo = middleware.before_write([job])
    try:
        return _write_job(job)
    except replicas.NotReplicated:
        raise  # written: it stands
    except BaseException:
        undo()
        raise


def _write_job(job: dict[str, Any]) -> str:
    """Write one job. A key of the wrong type raises key_guard.WrongTypeKey, naming the key, when the
    job wasn't written; after it was (only the queue registry refused), the push stands. With
    COGWORKER_REDIS_MIN_REPLICAS, a WAIT rides in the same write and replicas.NotReplicated is raised
    when too few replicas confirmed the job (it is written: store/replicas.py)."""
    conn = connection()
    wait = replicas.wait_command(settings())
    at = job.get("at")
    pipe = conn.pipeline(transaction=False)
    if at is not None and at > time.time():
        pipe.zadd(keys.SCHEDULE, {payload.scheduled_text(job): at})
        if wait is not None:
            pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
        added, *waited = pipe.execute(raise_on_error=False)
        if isinstance(added, Exception):
            if key_guard.is_wrong_type(added):
                raise key_guard.wrong_type_error(conn, keys.SCHEDULE) from added
            raise added
        if waited:
            replicas.check_push(settings(), waited[0], [str(job["jid"])])
        return str(job["jid"])
    job.pop("at", None)
    job["enqueued_at"] = time.time()
    queue_key = keys.queue(job["queue"])
    pipe.lpush(queue_key, codec.dumps(job))
    pipe.sadd(keys.QUEUES, job["queue"])
    pipe.publish(keys.WAKE_CHANNEL, job["queue"])
    if wait is not None:
        pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
    pushed, listed, woken, *waited = pipe.execute(raise_on_error=False)
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
    if waited:
        replicas.check_push(settings(), waited[0], [str(job["jid"])])
    return str(job["jid"])


def push_bulk(
    name: str,
    arg_lists: Iterable[Sequence[Any]],
    *,
    queue: str,
    options: dict[str, Any],
    at: float | None = None,
) -> list[str | None]:
    """Push one job per argument tuple; one round trip per batch of up to 1,000 jobs.

    Every argument is checked before anything is written, so a bad one pushes nothing. Returns
    the jids in order (None where a client middleware stopped that job). With
    COGWORKER_REDIS_MIN_REPLICAS, replicas.NotReplicated names the jids of the batch too few replicas
    confirmed: those and every earlier batch are written, later batches are not.
    """
    jobs = [build_job(name, tuple(args), {}, queue=queue, options=options, at=at) for args in arg_lists]
    step = _push_step
    if step is not None:
        return [run_client_chain(job, step) for job in jobs]
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
        undo = middleware.before_write(batch) if middleware.before_write_hooks and batch else None
        try:
            _write_batch(conn, batch)
        except replicas.NotReplicated:
            raise  # the batch is written: its claims and statuses stand
        except Exception:
            # Give back what the chain took for the batch (unique claims, "queued" statuses), or a
            # retried push_bulk would find every job a duplicate of one that was never pushed.
            abandon(batch)
            if undo is not None:
                undo()
            raise
    return jids


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
            scheduled += [at, payload.scheduled_text(job)]
        else:
            job.pop("at", None)
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(codec.dumps(job))
    args: list[Any] = [len(by_queue)]
    for name, raws in by_queue.items():
        args += [name, len(raws), *raws]
    args += [len(scheduled) // 2, *scheduled]
    script_keys = [keys.QUEUES, keys.WAKE_CHANNEL, keys.SCHEDULE, *(keys.queue(n) for n in by_queue)]
    script = _push_batch_script(conn)
    wait = replicas.wait_command(settings())
    waited: object = None
    if wait is None:
        reply = script(keys=script_keys, args=args, client=conn)
    else:
        reply, waited = _script_then_wait(conn, script, script_keys, args, wait)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
    if wait is not None:
        replicas.check_push(settings(), waited, [str(job["jid"]) for job in batch])


def _script_then_wait(
    conn: redis.Redis, script: Script, script_keys: list[str], args: list[Any], wait: tuple[Any, ...]
) -> tuple[Any, Any]:
    """The script and the WAIT in one pipeline, one round trip (EVALSHA, not redis-py's script
    pipelining, which asks SCRIPT EXISTS first: a second round trip per batch)."""
    for command, body in (("EVALSHA", script.sha), ("EVAL", script.script)):
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command(command, body, len(script_keys), *script_keys, *args)  # type: ignore[no-untyped-call]
        pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
        reply, waited = pipe.execute(raise_on_error=False)
        if not isinstance(reply, redis.exceptions.NoScriptError):
            break
    if isinstance(reply, Exception):
        raise reply
    return reply, waited


_push_batch: tuple[redis.Redis, Script] | None = None


def _push_batch_script(conn: redis.Redis) -> Script:
    """push_batch.lua registered with the job API's client (redis-py reloads it after NOSCRIPT)."""
    global _push_batch
    cached = _push_batch
    if cached is None or cached[0] is not conn:
        cached = (conn, conn.register_script(scripts.source("push_batch")))
        _push_batch = cached
    return cached[1]
