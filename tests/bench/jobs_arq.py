"""arq's W4 job and worker settings, as `arq jobs_arq.WorkerSettings` imports them.

Stock settings but for max_jobs=500 (its default is 10): each `arq` process runs up to 500 jobs at
once on its event loop; W4 starts two such processes (multiproc.py). poll_delay stays at its 0.5 s:
shorter was slower here (one --quick run of the old W4, 0.05 s sleeps, 100 at once: 0.5 s 1,025
jobs/s, 0.05 s 808, 0.01 s 550), as both processes then race more often for the same job ids. Its peak
jobs at once stays under max_jobs for that reason: each poll reads up to max_jobs ids and the other
process has already taken some.
"""

from __future__ import annotations

import os
from typing import Any

import jobkit
from arq.connections import RedisSettings

MAX_JOBS = 500


async def w4(ctx: dict[str, Any], index: int) -> None:
    await jobkit.w4_job(index)


class WorkerSettings:
    functions = [w4]
    redis_settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])
    max_jobs = MAX_JOBS
