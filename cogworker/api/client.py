"""Pushing jobs to Redis: one job, or many in one round trip per batch.

The client knows job names, queues and payload options, not the `@job` decorator or the features
built on the middleware chains. A testing mode replaces the last step of a push (writing to Redis)
with its own through `install_push_step`, as Sidekiq's testing client is prepended to its client.

In the sharded layout (COGWORKER_CLUSTER_SHARDING=queues) each job is written to one partition of its
queue, on that partition's client (a ShardClients built per process, like the client, after a fork);
api/push_shards.py says which partition and what a push spanning partitions guarantees. A unique job's
claim is taken in the home slot by the client chain before that write (api/unique.py), as in the
one-slot layout."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis

from cogworker.api import middleware, payload, push_settle
from cogworker.api.middleware import compose_client_chain, run_client_chain
from cogworker.api.retry_filters import WORKER_SIDE
from cogworker.settings_fields import SettingsFields
from cogworker.store import shards
from cogworker.store.connection import connect
from cogworker.store.shard_clients import ShardClients

BULK_BATCH = 1000

# Guards only the assignments below. Nothing that runs code outside this module (loading settings,
# building a client) may run under it: `configure()` takes it, and anything called with it held could
# reach `configure()` again (a first push_bulk once hung forever that way).
_lock = threading.Lock()
_settings: SettingsFields | None = None
_redis: redis.Redis | None = None
# The sharded layout's partition clients (built on first use; None outside that layout).
_shards: ShardClients | None = None

PushStep = Callable[[dict[str, Any]], str]
# What a testing mode put in place of the write to Redis, or None.
_push_step: PushStep | None = None


def configure(settings: SettingsFields | None = None, client: redis.Redis | None = None) -> None:
    """Point the job API (pushes, results, statuses) at a Redis.

    Without a call, the first use reads the COGWORKER_* environment (`cogworker.load_settings()`).
    The settings' key prefix becomes this process's. Building a client doesn't connect: a wrong
    address shows at the first push.

    Args:
        settings: The settings to use. Default: `cogworker.load_settings()`.
        client: The Redis client to push with. Default: one built from the settings.

    Raises:
        ConfigError: No `settings` were given and the environment's are invalid.

    Example:
        >>> cogworker.configure(cogworker.load_settings(redis_url="redis://cache:6379/2"))  # doctest: +SKIP
    """
    global _settings, _redis, _shards
    new_settings = settings or _from_environment()
    # The prefix is the process's, not the client's: a worker's own keys and its jobs' pushes must agree.
    shards.use_settings(new_settings)
    new_client = client or connect(new_settings)
    with _lock:
        _settings, _redis, old_shards, _shards = new_settings, new_client, _shards, None
    if old_shards is not None:
        old_shards.close()


def close() -> None:
    """Disconnect the job API's client and its pool (an app shutting down: the FastAPI lifespan helper,
    cogworker/contrib/fastapi.py), and the event loops' clients of awaitable pushes (their closes are
    handed to their loops; `await cogworker.aio.close()` waits for the running loop's). The settings
    stay; the next push connects again."""
    global _redis, _shards
    _async_clients(close=True)
    with _lock:
        conn, _redis = _redis, None
        partitions, _shards = _shards, None
    if partitions is not None:
        partitions.close()  # the partitions' own clients; the home one is `conn`
    if conn is not None:
        conn.close()
        pool = getattr(conn, "connection_pool", None)
        if pool is not None:  # a pool the client was given isn't closed by close()
            pool.disconnect()


def reset_after_fork() -> None:
    """A forked child must not share its parent's sockets.

    The child runs one thread, and another thread of the parent may have held the lock when it
    forked (it would stay held here forever): the child gets a new lock instead of acquiring it."""
    global _lock, _redis, _shards
    _lock = threading.Lock()
    _redis = None
    _shards = None  # its clients' sockets are the parent's too: forgotten, not closed
    _async_clients(close=False)


def _async_clients(*, close: bool) -> None:
    """Close (or, in a forked child, forget) the awaitable pushes' clients, if any was built: the
    module is imported only by a first awaitable push (store/async_connection.py)."""
    module = sys.modules.get("cogworker.store.async_connection")
    if module is not None:
        if close:
            module.close_all()
        else:
            module.forget_all()


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
            shards.use_settings(loaded)
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


def shard_clients() -> ShardClients:
    """The partition clients of the sharded layout, the job API's client as their home, built on
    first use (outside that layout every partition's client is that one client)."""
    global _shards
    current = _shards
    if current is not None:
        return current
    built = ShardClients(settings(), home=connection())
    with _lock:
        if _shards is None:
            _shards = built
        kept = _shards
    if built is not kept:
        built.close()
    return kept


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
    undo = middleware.before_write([job]) if middleware.before_write_hooks else None
    push_settle.write_settled(connection(), [job], undo, settings=settings(), clients=shard_clients)
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
        if batch:
            # On failure, what the chain took for the jobs not written (unique claims, "queued"
            # statuses) is given back, or a retried push_bulk would find every job a duplicate of
            # one that was never pushed; for jobs written (a lost reply) it stands.
            push_settle.write_settled(
                conn, batch, undo, settings=settings(), clients=shard_clients, abandon_chain=True
            )
    return jids
