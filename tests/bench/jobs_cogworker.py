"""cogworker's benchmark jobs. Workers import this module through COGWORKER_REQUIRE=jobs_cogworker."""

from __future__ import annotations

import copyprobe
import jobkit

import cogworker
from cogworker import job


@job(queue="default")
def noop() -> None:
    jobkit.mark_done()


# `empty` in make bench (tests/bench/framework_cost.py): no body at all, so a drain measures the
# runner's own machinery (fetch, hand-off, acknowledgement), apart from what a job's Redis client costs.
@job(queue="default")
def empty() -> None:
    return None


# The payload curve's heap profile (curves/payload.py): a worker started with BENCH_COPY_PROBE counts
# payload-sized copies (copyprobe.py).
if copyprobe.enabled():
    copyprobe.install(copyprobe.enabled())


# The payload curve (curves/payload.py): W1's job with one string argument of a given size.
@job(queue="default")
def payload(data: str) -> None:
    if copyprobe.enabled():
        copyprobe.report(jobkit.client().rpush)
    jobkit.mark_done()


# The shards curve's faults (curves/shards_faults.py): W1's job, telling which job it was.
@job(queue="default")
def tagged(queue: str, index: int) -> None:
    jobkit.mark_tagged(queue, index)


@job(queue="default")
def pickup(pushed_at: float) -> None:
    jobkit.record_pickup(pushed_at)


# The curves (curves/procs.py, curves/load.py): a job that waits 10 ms on I/O, and a paced pickup.
@job(queue="default")
def io_wait() -> None:
    jobkit.io_wait()


@job(queue="default")
def paced(pushed_at: float) -> None:
    jobkit.record_paced(pushed_at)


@job(queue="default")
def sleeper(index: int, seconds: float) -> None:
    jobkit.sleep_job(index, seconds)


@job(queue="default")
async def w4(index: int) -> None:
    await jobkit.w4_job(index)


# `limiter` in make bench (tests/bench/limiter_overhead.py): W1's job behind a concurrent limiter far
# above the load (a swarm runs 2 x 8 jobs at once), so it never turns one away: what a check costs.
UNBOUNDED = cogworker.limiter.concurrent("bench", 10_000, lease_s=60)


@job(queue="default", limit=UNBOUNDED)
def noop_limited() -> None:
    jobkit.mark_done()
