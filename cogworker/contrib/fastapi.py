"""FastAPI and Starlette: a lifespan that points the job API at Redis when the app starts and closes
its connections when it stops (docs/integrations/fastapi.md). It uses only the ASGI lifespan, so it
serves any Starlette app as well as FastAPI (neither is imported here).

    app = FastAPI(lifespan=cogworker.contrib.fastapi.lifespan)
    app.mount("/jobs", cogworker.web.create_app())        # the Web UI, with cogworker-redis[web]

With settings of its own: `lifespan=functools.partial(lifespan, settings=my_settings)`; inside a
lifespan of the app's own: `async with cogworker.contrib.fastapi.lifespan(app): yield`.

Settings are loaded, and checked, at startup: a bad COGWORKER_* value stops the app from starting
with the same one-line error a worker gives, rather than failing the first request that pushes.
From an `async def` endpoint push with `await job.aio.perform_async(...)`: it runs on the event loop's
own `redis.asyncio` client and never blocks the loop (api/aio_client.py). The sync `perform_async` is a
blocking Redis round trip, for `def` endpoints (FastAPI runs those in its threadpool).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from cogworker.api import client
from cogworker.settings import Settings, load_settings
from cogworker.store import async_connection


@contextlib.asynccontextmanager
async def lifespan(app: object = None, *, settings: Settings | None = None) -> AsyncIterator[None]:
    """Configure the job API for the app's life; close its clients when the app shuts down.

    The sync client's pool is closed, and the event loop's client of awaitable pushes
    (`job.aio.perform_async`) is closed and waited for.

    Args:
        app: The ASGI app (given by Starlette; unused).
        settings: The settings to use. Default: COGWORKER_* from the environment, read at startup.

    Yields:
        Nothing: the app runs meanwhile.

    Raises:
        ConfigError: A COGWORKER_* value is invalid: the app doesn't start.

    Example:
        >>> app = FastAPI(lifespan=cogworker.contrib.fastapi.lifespan)  # doctest: +SKIP
    """
    client.configure(settings or load_settings())
    try:
        yield
    finally:
        await async_connection.close_current()
        client.close()
