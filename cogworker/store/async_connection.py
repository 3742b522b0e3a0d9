"""The job API's `redis.asyncio` clients, one per event loop: what an awaitable push writes with.

A `redis.asyncio` connection belongs to the loop that opened it (its streams are that loop's), so a
client can't be shared between loops: an app running one loop per thread, or a test suite starting a
loop per test, would get "attached to a different loop" errors. Each loop gets its own client, built
from the same settings as the sync client (store/connection.py): the same timeouts, no retries of
redis-py's own, TLS files, decoding, and the same three shapes of deployment:

- a single server (`redis://`, `rediss://`, `unix://`);
- Sentinel: a pool asking a majority of the sentinels for the master at each connect;
- a Redis Cluster: a pool pinned to the master owning the deployment's slot (cluster_pool.py says
  why one slot is enough). Where that master is, is found by the sync `SlotOwner` on a thread, so
  the loop never waits on a socket for it.

In the sharded layout (COGWORKER_CLUSTER_SHARDING=queues) a loop's client is the home slot's, and each
queue partition's slot gets a client of its own on that loop (`for_partition`), kept and closed with it.

A loop's client is forgotten when the loop is (a WeakKeyDictionary), and closed as the loop shuts
down: it is tied to an async generator of that loop, which `asyncio.run` (and uvicorn, and every
`asyncio.Runner`) closes before closing the loop. `close_current()` closes the running loop's
client sooner (an app's shutdown).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from cogworker import cluster_url, redis_sentinel
from cogworker.redis_tls import client_options
from cogworker.settings_fields import SettingsFields
from cogworker.store import async_cluster, cluster_pool, shards
from cogworker.store.connection import CONNECT_TIMEOUT_S, ENCODING, ENCODING_ERRORS
from cogworker.store.sentinel_pool import majority, sentinel_options


class LoopClient:
    """One loop's client, the settings it was built from, and what must be closed with it."""

    def __init__(self, settings: SettingsFields, conn: aredis.Redis, sentinel: Sentinel | None) -> None:
        self.settings = settings
        self.conn = conn
        self._sentinel = sentinel
        self._closer: AsyncIterator[None] | None = None
        self.closed = False
        # The sharded layout's partition clients, by slot (store/shard_clients.py's, for this loop).
        self.partitions: dict[int, aredis.Redis] = {}

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        partitions, self.partitions = list(self.partitions.values()), {}
        for partition in partitions:
            await partition.aclose()
        await self.conn.aclose()
        if self._sentinel is not None:
            await self._sentinel.aclose()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClient] = weakref.WeakKeyDictionary()


async def _close_at_shutdown(client: LoopClient) -> AsyncIterator[None]:
    """Suspended at its `yield` for the loop's life; the loop's shutdown_asyncgens() closes it."""
    try:
        yield
    finally:
        await client.aclose()


async def for_loop(settings: SettingsFields) -> aredis.Redis:
    """The running loop's client for `settings`, built on first use (building doesn't connect).
    Settings changed since (`cogworker.configure`): the old client is closed and a new one built."""
    loop = asyncio.get_running_loop()
    current = _clients.get(loop)
    if current is not None and current.settings is settings and not current.closed:
        return current.conn
    built = build(settings)
    closer = _close_at_shutdown(built)
    # Started here, so the loop's async-generator hook registers it with the loop; kept by the entry,
    # so it isn't finalized (and the client closed) while the loop still runs. It runs to its
    # `yield` without suspending: no other task can build a second client meanwhile.
    await anext(closer)
    built._closer = closer
    _clients[loop] = built
    if current is not None:
        await current.aclose()  # after the new one is in place: a task arriving meanwhile uses it
    return built.conn


async def for_partition(settings: SettingsFields, partition: shards.Partition) -> aredis.Redis:
    """The running loop's client for `partition`'s slot (the sharded layout), pinned to the master
    owning it; built on first use. Outside that layout, the loop's one client."""
    conn = await for_loop(settings)
    if not shards.is_sharded():
        return conn
    entry = _clients[asyncio.get_running_loop()]
    prefix = partition.prefix
    slot = cluster_pool.slot_of(prefix)
    client = entry.partitions.get(slot)
    if client is None:
        # Building doesn't connect; no await between the look-up and the store, so one per slot.
        seeds = cluster_url.seeds(settings.redis_url)
        client = async_cluster.cluster_client(seeds, prefix, **options(settings))
        entry.partitions[slot] = client
    return client


async def close_current() -> None:
    """Close and forget the running loop's client, if it has one (the next push builds another)."""
    current = _clients.pop(asyncio.get_running_loop(), None)
    if current is not None:
        await current.aclose()


def close_all() -> None:
    """Close every loop's client, from any thread, without waiting (`cogworker.client.close()`).

    A running loop is handed its client's close; a loop not running closes it when it next runs (the
    client's closing generator, forgotten here, is finalized on its own loop)."""
    entries = list(_clients.items())
    _clients.clear()
    for loop, entry in entries:
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(entry.aclose(), loop)


def forget_all() -> None:
    """Forget every loop's client without closing it: after a fork, the child must not touch its
    parent's sockets (nor can it await on the parent's loops)."""
    for entry in _clients.values():
        entry.closed = True  # its closing generator, finalized some day, must not close them either
    _clients.clear()


def options(settings: SettingsFields) -> dict[str, Any]:
    """The options `connect()` gives a sync client, for `redis.asyncio` (which packs commands in
    Python, honouring `encoding_errors`: no lossless packer is needed)."""
    return dict(
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry_on_timeout=False,
        retry=None,
        health_check_interval=0,
        client_name=None,
        decode_responses=True,
        encoding=ENCODING,
        encoding_errors=ENCODING_ERRORS,
        **client_options(settings),
    )


def build(settings: SettingsFields) -> LoopClient:
    """A client for `settings`' deployment: single server, Sentinel or Cluster, TLS or not."""
    opts = options(settings)
    if cluster_url.is_cluster(settings):
        seeds = cluster_url.seeds(settings.redis_url)
        # The sharded layout's deployment prefix has no hash tag: its client is the home slot's.
        pinned = settings.key_prefix
        if settings.cluster_sharding == "queues":
            pinned = shards.home_prefix(settings.key_prefix)
        return LoopClient(settings, async_cluster.cluster_client(seeds, pinned, **opts), None)
    target = redis_sentinel.target(settings)
    if target is not None:
        return _sentinel_client(settings, target, opts)
    return LoopClient(settings, aredis.Redis.from_url(settings.redis_url, **opts), None)


class MajoritySentinel(Sentinel):
    """sentinel_pool.MajoritySentinel for redis.asyncio: a master is believed only when most of the
    sentinels name it (that module says why the first healthy answer is not enough)."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        named: list[tuple[str, int]] = []
        errors: list[str] = []
        for sentinel in self.sentinels:
            try:
                masters: dict[str, Any] = await sentinel.sentinel_masters()  # type: ignore[assignment]
                state = masters.get(service_name)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if state and self.check_master_state(state, service_name):
                named.append((str(state["ip"]), int(state["port"])))
        return majority(service_name, len(self.sentinels), named, errors)


def _sentinel_client(
    settings: SettingsFields, target: redis_sentinel.SentinelTarget, opts: dict[str, Any]
) -> LoopClient:
    sentinel_kwargs = sentinel_options(target, settings.redis_sentinel_password.get_secret_value(), opts)
    sentinel = MajoritySentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
        target.master,
        sentinel,
        ssl=target.tls,
        username=target.username,
        password=target.password,
        db=target.db,
        **opts,
    )
    return LoopClient(settings, aredis.Redis.from_pool(pool), sentinel)
