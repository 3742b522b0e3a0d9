"""A FastAPI app for tests/e2e/aio/test_aio_uvicorn.py, served by uvicorn: `async def` endpoints that
push with `await job.aio.perform_async` and with the blocking `job.perform_async`, and a loop-lag
probe: a task that asks to sleep 10 ms over and over and records how late it wakes. While a push
waits on Redis, the awaitable one lets the probe run on time; the blocking one holds the loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI

import cogworker
from cogworker.contrib.fastapi import lifespan as cogworker_lifespan

TICK_S = 0.01


@cogworker.job(name="lag_app.probe")
def probe(n: int) -> None: ...


class LagProbe:
    def __init__(self) -> None:
        self.worst_s = 0.0

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(TICK_S)
            self.worst_s = max(self.worst_s, time.monotonic() - started - TICK_S)


def create_app() -> FastAPI:
    lag = LagProbe()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with cogworker_lifespan(app):
            task = asyncio.create_task(lag.run())
            try:
                yield
            finally:
                task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/aio/{n}")
    async def push_awaitable(n: int) -> dict[str, str | None]:
        return {"jid": await probe.aio.perform_async(n)}

    @app.post("/sync/{n}")
    async def push_blocking(n: int) -> dict[str, str | None]:
        return {"jid": probe.perform_async(n)}  # the mistake: a blocking round trip on the loop

    @app.post("/lag/reset")
    async def reset() -> dict[str, float]:
        lag.worst_s = 0.0
        return {"worst_s": 0.0}

    @app.get("/lag")
    async def worst() -> dict[str, float]:
        return {"worst_s": lag.worst_s}

    return app
