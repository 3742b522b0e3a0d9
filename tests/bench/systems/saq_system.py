"""SAQ (W4 only): two `saq jobs_saq.settings` processes under multiproc.py, concurrency=500 each."""

from __future__ import annotations

import asyncio
import sys
from importlib import metadata
from pathlib import Path

from systems.base import ASYNC_PER_PROCESS, WORKER_PROCESSES, AsyncOnlySystem

MULTIPROC = Path(__file__).resolve().parents[1] / "multiproc.py"
PUSH_BATCH = 200  # enqueue calls in flight at once while pushing W4's backlog


class Saq(AsyncOnlySystem):
    name = "saq"
    w4_config = (
        f"saq: {WORKER_PROCESSES} `saq jobs_saq.settings` processes (one worker each, under "
        f"multiproc.py: saq's own --workers forks children a SIGTERM does not reach), settings "
        f"concurrency={ASYNC_PER_PROCESS}, all else default."
    )

    def w4_argv(self) -> list[str]:
        return [sys.executable, str(MULTIPROC), str(WORKER_PROCESSES), "saq", "jobs_saq.settings"]

    def version(self) -> str:
        return metadata.version("saq")

    def push_w4(self, count: int) -> None:
        from saq import Queue

        async def push() -> None:
            queue = Queue.from_url(self.redis_url)
            await queue.connect()
            try:
                for start in range(0, count, PUSH_BATCH):
                    batch = range(start, min(count, start + PUSH_BATCH))
                    await asyncio.gather(*(queue.enqueue("w4", index=i) for i in batch))
            finally:
                await queue.disconnect()

        asyncio.run(push())

    def close(self) -> None:
        return None
