"""arq (W4 only): two `arq jobs_arq.WorkerSettings` processes under multiproc.py, max_jobs=500 each."""

from __future__ import annotations

import asyncio
import sys
from importlib import metadata
from pathlib import Path

from systems.base import ASYNC_PER_PROCESS, WORKER_PROCESSES, AsyncOnlySystem

MULTIPROC = Path(__file__).resolve().parents[1] / "multiproc.py"
PUSH_BATCH = 200  # enqueue_job calls in flight at once while pushing W4's backlog


class Arq(AsyncOnlySystem):
    name = "arq"
    w4_config = (
        f"arq: {WORKER_PROCESSES} `arq jobs_arq.WorkerSettings` processes (one per copy, under "
        f"multiproc.py), WorkerSettings.max_jobs={ASYNC_PER_PROCESS}, all else default (poll_delay "
        "0.5 s, results kept 1 h); installed --no-deps on the bench's redis-py (requirements-arq.txt)."
    )

    def w4_argv(self) -> list[str]:
        return [sys.executable, str(MULTIPROC), str(WORKER_PROCESSES), "arq", "jobs_arq.WorkerSettings"]

    def version(self) -> str:
        return metadata.version("arq")

    def push_w4(self, count: int) -> None:
        from arq import create_pool
        from arq.connections import RedisSettings

        async def push() -> None:
            pool = await create_pool(RedisSettings.from_dsn(self.redis_url))
            try:
                for start in range(0, count, PUSH_BATCH):
                    batch = range(start, min(count, start + PUSH_BATCH))
                    await asyncio.gather(*(pool.enqueue_job("w4", i) for i in batch))
            finally:
                await pool.aclose()

        asyncio.run(push())

    def close(self) -> None:
        return None
