"""SAQ's W4 job and worker settings, as `saq jobs_saq.settings --workers 2` imports them.

Stock settings but for concurrency=500 (its default is 10): each worker process runs up to 500 jobs
at once on its event loop.
"""

from __future__ import annotations

import os
from typing import Any

import jobkit
from saq import Queue

CONCURRENCY = 500

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"])


async def w4(ctx: dict[str, Any], *, index: int) -> None:
    await jobkit.w4_job(index)


settings = {"queue": queue, "functions": [w4], "concurrency": CONCURRENCY}
