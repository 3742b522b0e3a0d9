"""The server middleware chain around an `async def` job, run on the worker's event loop.

A worker runs an async job's middleware, its body and its settling as one task on its event loop
(worker/running/async_process.py), so a slot is free the moment the job ends. The chain is the same
`cogworker.server_chain` every job goes through; each entry is run the way its kind needs:

- An async middleware (`async def mw(job, call_next)`, or an object whose `__call__` is `async def`)
  is awaited on the loop; it awaits `call_next()` to run the job.
- The built-in middleware that talk to Redis (the job's status, the release of its unique claim) are
  replaced, at their place in the chain, by their ports below: the status is written through the
  loop's `redis.asyncio` client, the release (owner-checked, deferred and retried when Redis is away,
  as `Locks` does it) on a thread.
- Every other middleware is sync (`mw(job, call_next)`, as users have always written them). A run of
  consecutive sync middleware is called on a thread of the worker's bridge pool, in the task's
  context (`contextvars`), and its innermost `call_next()` hands the rest of the chain back to the
  loop and waits for it there. So sync middleware keeps working unchanged around async jobs: what it
  sets in a contextvar is seen by the job, the job's exception passes through it, and it may block.
  That costs a thread switch each way, per job, and a bridge thread held while the job runs: write
  middleware `async def` where its async jobs are many.

A sync job (on a job thread) meets an async middleware too: it is run to completion there, on a
private loop (`middleware.run_server_chain`), so either kind of middleware wraps every job.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cogworker.api import aio_features, client, job_status, unique
from cogworker.api.current_job import JobCancelled
from cogworker.api.middleware import ServerMiddleware, server_chain
from cogworker.api.payload import DEFAULT_RETRIES, error_fields, terminal_failure
from cogworker.store import async_connection
from cogworker.store.locks import held_locks

AsyncServerNext = Callable[[], Awaitable[None]]
# How a run of sync middleware reaches a thread: given a no-argument call, run it there and await it.
RunSync = Callable[[Callable[[], None]], Awaitable[None]]


def is_async_middleware(middleware: Any) -> bool:
    """`middleware` is `async def` (a function, or an object whose `__call__` is one)."""
    return inspect.iscoroutinefunction(middleware) or inspect.iscoroutinefunction(
        getattr(middleware, "__call__", None)  # noqa: B004 - a callable object's own method
    )


async def _to_thread(call: Callable[[], None]) -> None:
    await asyncio.to_thread(call)


async def run_chain(job: dict[str, Any], perform: AsyncServerNext, run_sync: RunSync = _to_thread) -> None:
    """The server chain around `perform` (the job's body), on the running loop."""
    await _from(list(server_chain.entries), 0, job, perform, run_sync)


async def _from(
    entries: list[ServerMiddleware],
    index: int,
    job: dict[str, Any],
    perform: AsyncServerNext,
    run_sync: RunSync,
) -> None:
    if index == len(entries):
        await perform()
        return
    entry = entries[index]
    port = PORTS.get(entry)
    while port is not None and not port.applies(job):
        # A built-in with nothing to do for this job (no status tracked, no lock held): skipped
        # here, not awaited as a layer that only calls on (most jobs need neither).
        index += 1
        if index == len(entries):
            await perform()
            return
        entry = entries[index]
        port = PORTS.get(entry)
    if port is not None:
        await port.run(job, lambda: _from(entries, index + 1, job, perform, run_sync))
        return
    if is_async_middleware(entry):
        await entry(job, lambda: _from(entries, index + 1, job, perform, run_sync))  # type: ignore[arg-type,misc]
        return
    end = index
    while end < len(entries) and entries[end] not in PORTS and not is_async_middleware(entries[end]):
        end += 1
    loop = asyncio.get_running_loop()

    def rest() -> None:
        # On the bridge thread: the rest of the chain back on the loop, in this thread's context
        # (run_coroutine_threadsafe copies it), so what the sync middleware set reaches the job.
        asyncio.run_coroutine_threadsafe(_from(entries, end, job, perform, run_sync), loop).result()

    call: Callable[[], None] = rest
    for middleware in reversed(entries[index:end]):
        call = _link(middleware, job, call)
    await run_sync(call)


def _link(
    middleware: ServerMiddleware, job: dict[str, Any], call_next: Callable[[], None]
) -> Callable[[], None]:
    return lambda: middleware(job, call_next)


# The ports of the built-in server middleware -----------------------------------------------------
async def on_run(job: dict[str, Any], call_next: AsyncServerNext) -> None:
    """job_status.on_run: "working" around the run, then "complete", "retrying" or "failed"."""
    if not client.redis_in_use() or not job_status.tracked(job):
        await call_next()
        return
    await _write(job, "working")
    try:
        await call_next()
    except GeneratorExit:  # the job's task destroyed unfinished (given up on by a stop): no await
        raise
    except JobCancelled:
        await _write(job, "cancelled")
        raise
    except BaseException as exc:
        if getattr(exc, "cogworker_reschedule", False) and await asyncio.to_thread(
            job_status._limited, job, exc
        ):
            raise
        error = error_fields(exc)
        error["error_message"] = error["error_message"][:1000]
        if terminal_failure(job, DEFAULT_RETRIES):
            await _write(job, "failed", **error)
        else:
            await _write(job, "retrying", job_status._retry_wait_bound_s(job), **error)
        raise
    await _write(job, "complete")


async def _write(job: dict[str, Any], state: str, extra_ttl_s: float = 0.0, **fields: str) -> None:
    """job_status._write through the loop's client (aio_features.write_status); a client that can't
    be made is an outage like a failed write."""
    try:
        conn = await async_connection.for_loop(client.settings())
    except Exception as exc:
        job_status._outages.report(job_status.COMPONENT, exc)
        return
    await aio_features.write_status(conn, job, state, extra_ttl_s, **fields)


async def release_when_done(job: dict[str, Any], call_next: AsyncServerNext) -> None:
    """unique.release_when_done: free the job's locks once it has run (the same decisions; the
    release itself, owner-checked and deferred when Redis is away, on a thread)."""
    if not client.redis_in_use() or not held_locks(job):
        await call_next()
        return
    try:
        await call_next()
    except GeneratorExit:
        raise
    except BaseException as exc:
        if isinstance(exc, JobCancelled) or (
            terminal_failure(job, DEFAULT_RETRIES) and not unique._put_back(job, exc)
        ):
            await asyncio.to_thread(unique._release, job)
        raise
    await asyncio.to_thread(unique._release, job)


@dataclass(frozen=True, slots=True)
class Port:
    """A built-in server middleware's async form, and whether it has anything to do for a job."""

    run: Callable[[dict[str, Any], AsyncServerNext], Awaitable[None]]
    applies: Callable[[dict[str, Any]], bool]


PORTS: dict[Any, Port] = {
    job_status.on_run: Port(on_run, lambda job: client.redis_in_use() and job_status.tracked(job)),
    unique.release_when_done: Port(
        release_when_done, lambda job: client.redis_in_use() and bool(held_locks(job))
    ),
}
