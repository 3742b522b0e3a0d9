"""Awaitable pushes for async code (FastAPI, Starlette, aiohttp...): the event loop never waits on Redis.

One job at a time goes through the job itself: `await job.aio.perform_async(...)`, `job.aio.perform_in`,
`job.aio.perform_at`, and `job.set(...).aio.perform_async(...)`. Many at once go through `push_bulk`
here, and jobs for Ruby classes through `push_named` (`cogworker.push_named`, awaitable). Each running
event loop gets its own `redis.asyncio` client, closed when the loop shuts down
or by `cogworker.aio.close()` (the FastAPI lifespan helper calls it).

Example:
    ```python
    import cogworker.aio

    jids = await cogworker.aio.push_bulk(send_welcome, [(1,), (2,), (3,)])
    ```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cogworker.api import aio_client
from cogworker.api.aio_push import AsyncPusher
from cogworker.api.decorator import BulkPush, JobFunction, JobSetter
from cogworker.api.named_push import push_named_async as push_named
from cogworker.store import async_connection

__all__ = ["AsyncPusher", "close", "push_bulk", "push_named"]


async def push_bulk(
    fn: JobFunction[..., Any] | JobSetter[..., Any],
    arg_lists: Iterable[Sequence[Any]],
    *,
    at: float | None = None,
    queue: str | None = None,
) -> list[str | None]:
    """Push one job per argument tuple; one round trip per batch of up to 1,000 jobs.

    `cogworker.push_bulk`, awaitable: every argument is checked before anything is written, so a bad
    one pushes nothing.

    Args:
        fn: A job, or `job.set(...)`, whose options then apply to every job pushed.
        arg_lists: One sequence of positional arguments per job.
        at: When the jobs are due, in epoch seconds. Default: now.
        queue: The queue for every job. Default: the job's (or `set`'s) queue.

    Returns:
        The jids in order, None where a client middleware stopped that job.

    Raises:
        TypeError: `fn` is not a job, or an argument is not JSON-native; nothing was pushed.
        PushOutcomeUnknown: A batch got no answer and whether it was written can't be known; earlier
            batches are written, later ones are not.
        NotReplicated: Too few replicas confirmed a batch (COGWORKER_REDIS_MIN_REPLICAS); it and
            every earlier batch are written, later ones are not.
        WrongTypeKey: A key the push writes holds another type of value.

    Example:
        >>> await cogworker.aio.push_bulk(send_welcome, [(1,), (2,), (3,)])  # doctest: +SKIP
    """
    bulk = BulkPush.of(fn, arg_lists, queue)
    return await aio_client.push_bulk(
        bulk.name, bulk.arg_lists, queue=bulk.queue, options=bulk.options, at=at
    )


async def close() -> None:
    """Close the running event loop's Redis client (an app shutting down); the next push connects again.

    `cogworker.contrib.fastapi.lifespan` calls it. Without a call the client is closed as its loop
    shuts down (`asyncio.run`, uvicorn).
    """
    await async_connection.close_current()
