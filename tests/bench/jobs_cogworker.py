"""cogworker's benchmark jobs. Workers import this module through COGWORKER_REQUIRE=jobs_cogworker."""

from __future__ import annotations

import jobkit

from cogworker import job


@job(queue="default")
def noop() -> None:
    jobkit.mark_done()


@job(queue="default")
def pickup(pushed_at: float) -> None:
    jobkit.record_pickup(pushed_at)


@job(queue="default")
def sleeper(index: int, seconds: float) -> None:
    jobkit.sleep_job(index, seconds)


@job(queue="default")
async def w4(index: int) -> None:
    await jobkit.w4_job(index)
