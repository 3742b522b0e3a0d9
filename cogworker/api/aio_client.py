"""Awaitable pushes: the client chain and the write of api/client.py, without blocking the event loop.

The client middleware chain is synchronous: a middleware calls `call_next(job)` and gets the jid
back. An awaitable push runs it on the loop all the same, as `client.push_bulk` does, and the event
loop never waits on a socket:

- The built-in middleware that talk to Redis (the unique claim, the "queued" status) are replaced,
  at their place in the chain, by their `redis.asyncio` ports (api/aio_features.py).
- Every other middleware (expiry, yours, OpenTelemetry's) runs as written, in runs of consecutive
  sync middleware, each run ending in a collecting step that returns the jid: the chain decides,
  then the push goes on (the async middleware after the run, then the write). If the push then
  doesn't happen (a later middleware stops it, or the write fails and the job is known not to be
  written), the abandon hooks give back what the sync middleware took, as for push_bulk. Unlike
  in a sync push, a sync middleware doesn't see the write's exception: it has already returned.
- The write is `push_batch.lua` and the WAIT in one round trip, and a failed write is sorted out
  by `push_check.lua` before anything is undone (api/aio_write.py).

A push that needs sync Redis work only the sync client can do runs its whole sync path on a thread
(`asyncio.to_thread`, which copies the context, so an open batch follows it): a push inside a
`cogworker.batch(...)` block (the batch registers its members first), or with a before-write hook
of another kind. So does a push in the inline testing mode (the job runs in the push); the fake
mode records on the loop. A Django transaction deferral is not consulted: Django's atomic blocks
are sync-only, so no awaitable push is ever inside one, and the deferral would send it at once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aredis

from cogworker.api import aio_features, aio_write, client, middleware, push_outcome, push_shards
from cogworker.api.aio_features import AsyncNext
from cogworker.api.middleware import ClientMiddleware
from cogworker.api.push_outcome import may_be_queued
from cogworker.store import async_connection, replicas, shards


async def send(job: dict[str, Any]) -> str | None:
    """`client.send_now`, awaitable: the client chain, then the write (or the testing mode's step)."""
    if client._push_step is not None:
        from cogworker import testing

        if testing.mode == "inline":
            return await asyncio.to_thread(client.send_now, job)
        return client.send_now(job)
    if _needs_sync_client():
        return await asyncio.to_thread(client.send_now, job)
    conn = await async_connection.for_loop(client.settings())

    async def write_one(job: dict[str, Any]) -> str:
        await write_settled(conn, [job])
        return str(job["jid"])

    jid: str | None = await run_chain(conn, job, write_one)
    return jid


async def push_bulk(
    name: str,
    arg_lists: Iterable[Sequence[Any]],
    *,
    queue: str,
    options: dict[str, Any],
    at: float | None = None,
) -> list[str | None]:
    """`client.push_bulk`, awaitable: one round trip per batch of up to 1,000 jobs."""
    if client._push_step is not None or _needs_sync_client():
        return await asyncio.to_thread(
            client.push_bulk, name, list(arg_lists), queue=queue, options=options, at=at
        )
    jobs = [
        client.build_job(name, tuple(args), {}, queue=queue, options=options, at=at) for args in arg_lists
    ]
    conn = await async_connection.for_loop(client.settings())
    jids: list[str | None] = []
    for start in range(0, len(jobs), client.BULK_BATCH):
        batch: list[dict[str, Any]] = []

        async def collect(job: dict[str, Any], batch: list[dict[str, Any]] = batch) -> str:
            batch.append(job)
            return str(job["jid"])

        for job in jobs[start : start + client.BULK_BATCH]:
            jids.append(await run_chain(conn, job, collect))
        if batch:
            # On failure what the chain took for the jobs known not written is given back, or a
            # retried push_bulk would find every job a duplicate of one never pushed.
            await write_settled(conn, batch, abandon_chain=True)
    return jids


def _needs_sync_client() -> bool:
    """Whether a before-write hook would do work now: an open batch's registration (api/batch.py),
    or a hook of another kind. Those use the sync client, so the push runs on a thread."""
    hooks = middleware.before_write_hooks
    if not hooks:
        return False
    # Looked up, not imported: api/batch.py imports the decorator, which imports this module. Its
    # hook is registered when it is imported, so without it no batch can be open.
    batch = sys.modules.get("cogworker.api.batch")
    if batch is None:
        return True
    return batch._open.get() is not None or any(hook is not batch._register for hook in hooks)


async def run_chain(conn: aredis.Redis, job: dict[str, Any], terminal: AsyncNext) -> Any:
    """The client chain around `terminal`, the Redis built-ins replaced by their async ports."""
    return await _from(list(middleware.client_chain.entries), 0, conn, job, terminal)


async def _from(
    entries: list[ClientMiddleware], index: int, conn: aredis.Redis, job: dict[str, Any], terminal: AsyncNext
) -> Any:
    if index == len(entries):
        return await terminal(job)
    port = aio_features.PORTS.get(entries[index])
    if port is not None:
        return await port(job, lambda j: _from(entries, index + 1, conn, j, terminal), conn)
    end = index
    while end < len(entries) and entries[end] not in aio_features.PORTS:
        end += 1
    collected: list[dict[str, Any]] = []

    def collect(job: dict[str, Any]) -> str:
        collected.append(job)
        return str(job["jid"])

    # A middleware calling call_next twice would push twice in a sync push; here the first call
    # decides and the job goes on once.
    call: Callable[[dict[str, Any]], Any] = collect
    for sync_middleware in reversed(entries[index:end]):
        call = middleware._link(sync_middleware, call)
    answer = call(job)
    if not collected:
        return answer  # stopped by a middleware of the run (None), or answered without pushing
    passed = collected[0]
    try:
        pushed = await _from(entries, end, conn, passed, terminal)
    except BaseException as exc:
        if not may_be_queued(exc):
            abandon_sync([passed])
        raise
    if pushed is None:
        abandon_sync([passed])
        return None
    return answer


def abandon_sync(jobs: list[dict[str, Any]]) -> None:
    """The abandon hooks of the sync middleware (the ported built-ins give back their own)."""
    for hook in middleware.abandon_hooks:
        if hook not in aio_features.PORTED_ABANDON_HOOKS:
            hook(jobs)


async def write_settled(
    conn: aredis.Redis, jobs: list[dict[str, Any]], *, abandon_chain: bool = False
) -> None:
    """client._write_settled, awaitable: write `jobs`; on failure, with `abandon_chain`, give back
    what the chain took only for the jobs known not to be written. In the sharded layout, one write
    per queue partition on the loop's client for it (api/push_settle.py's rules)."""
    if shards.is_sharded():
        await _write_partitions(conn, jobs, abandon_chain=abandon_chain)
        return
    await _write_group(conn, conn, jobs, abandon_chain=abandon_chain, partition=None)


async def _write_group(
    home: aredis.Redis,
    conn: aredis.Redis,
    jobs: list[dict[str, Any]],
    *,
    abandon_chain: bool,
    partition: shards.Partition | None,
) -> None:
    """One write of `jobs` on `conn` (`partition`'s client), settled; `home` holds what is given back."""
    settings = client.settings()
    attempt = push_outcome.new_attempt()
    try:
        await aio_write.write(conn, settings, jobs, attempt, partition)
        return
    except replicas.NotReplicated:
        raise  # written: it stands
    except BaseException as exc:
        # Raises PushOutcomeUnknown, undoing nothing, when whether they were written can't be known.
        lost = await aio_write.unwritten(conn, jobs, attempt, exc, partition)
        if not lost:
            unconfirmed = replicas.unconfirmed(settings, [str(job["jid"]) for job in jobs])
            if unconfirmed is not None:
                raise unconfirmed from exc
            return
        if abandon_chain:
            await _give_back(home, lost)
        raise


async def _write_partitions(home: aredis.Redis, jobs: list[dict[str, Any]], *, abandon_chain: bool) -> None:
    """push_settle._write_partitions, awaitable: the queues recorded on their first push (on the sync
    home client, on a thread: once per queue and process), then one settled write per partition, in
    order, the first that fails stopping the push."""
    settings = client.settings()
    groups = push_shards.split(jobs)
    try:
        new_queues = push_shards.to_record(jobs)
        if new_queues:
            await asyncio.to_thread(push_shards.record, client.connection(), new_queues)
    except BaseException:
        if abandon_chain:
            await _give_back(home, jobs)  # nothing was sent
        raise
    for index, (partition, group) in enumerate(groups):
        try:
            conn = await async_connection.for_partition(settings, partition)
            await _write_group(home, conn, group, abandon_chain=abandon_chain, partition=partition)
        except BaseException as exc:
            later = push_shards.never_sent(groups[index + 1 :])
            if later and abandon_chain:
                await _give_back(home, later)
            push_shards.note_written(exc, push_shards.never_sent(groups[:index]))
            raise


async def _give_back(home: aredis.Redis, lost: list[dict[str, Any]]) -> None:
    await aio_features.give_back_claims(home, lost)
    await aio_features.forget_statuses(home, lost)
    abandon_sync(lost)
