"""`empty` in make bench (issue 18): W1's drain with jobs that have no body at all.

W1's job does one INCR through the job's own Redis client, so W1 measures that client as much as
the runner: redis-py under 8 threads of one process costs ~190 µs of CPU per INCR on a 2-core
machine (~95 µs from one thread: the GIL is handed over at every socket call), redis-rb far less.
This step takes the client out and leaves each runner's own machinery: fetch, hand-off to a thread,
acknowledgement. cogworker and Sidekiq (with and without YJIT) are run; the Python peers would need
a way to time a drain without a job body reporting it, which is what their own job counters are not
(each counts differently).

A drain is timed by the queue: from the moment a tenth of the jobs has left it (start-up apart) to
the moment it is empty. A job still running then (at most a process's threads plus what it holds)
is not counted, in either system. The runs alternate between systems, so a machine that slows down
slows all of them alike. Figures: jobs/s, CPU µs per job of the workers and of Redis (median of the
runs), and the share of the machine's CPU used.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import systems
from context import Context
from procs import wait_for
from throughput import CpuSample

SYSTEMS = ("cogworker", "sidekiq-yjit", "sidekiq")
JOBS = 100_000
QUICK_JOBS = 20_000
POLL_S = 0.005


def drain_empty(ctx: Context, system: Any, jobs: int) -> dict[str, Any]:
    ctx.redis.flush()
    system.push_empty_bulk(jobs)
    client = ctx.client

    def left() -> int:
        return int(client.llen(system.queue_key))

    group = ctx.start(system, "empty")
    try:
        wait_for(lambda: left() <= jobs * 0.9, 120.0, "a tenth of the jobs", group, step_s=POLL_S)
        start, left_at_start = CpuSample.take(ctx, group), left()
        wait_for(lambda: left() == 0, 300.0, "the queue to empty", group, step_s=POLL_S)
        end = CpuSample.take(ctx, group)
    finally:
        ctx.stop(group)
    ran = left_at_start
    return {
        "jobs_per_s": ran / (end.at - start.at),
        "workers_cpu_us_per_job": (end.workers - start.workers) * 1e6 / ran,
        "redis_cpu_us_per_job": (end.redis - start.redis) * 1e6 / ran,
        "cpu_used_pct": end.used_pct_since(start),
    }


def framework_cost(ctx: Context, say: Callable[[str], None]) -> dict[str, Any]:
    jobs = QUICK_JOBS if ctx.plan.quick else JOBS
    loaded: dict[str, Any] = {}
    result: dict[str, Any] = {"jobs": jobs, "runs": {}, "not_runnable": {}}
    try:
        for name in SYSTEMS:
            try:
                loaded[name] = systems.load(name, ctx.redis.url)
            except Exception as exc:  # no sidekiq on this machine: its rows say why
                result["not_runnable"][name] = f"{type(exc).__name__}: {exc}"
        for index in range(ctx.plan.w1_runs):
            for name, system in loaded.items():
                say(f"empty: run {index + 1} of {ctx.plan.w1_runs}, {name} ...")
                began = time.monotonic()
                result["runs"].setdefault(name, []).append(drain_empty(ctx, system, jobs))
                say(f"empty: {name} took {time.monotonic() - began:.1f} s")
        for name, runs in result["runs"].items():
            result[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        return result
    finally:
        for system in loaded.values():
            system.close()


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'empty jobs (no body), 2 x 8':<28}{'jobs/s':>10}{'workers µs/job':>16}{'Redis µs/job':>14}"
        f"{'CPU used %':>12}{'cog/peer':>10}",
        "-" * 90,
    ]
    ours = result.get("cogworker", {}).get("jobs_per_s")
    for name in SYSTEMS:
        if name in result["not_runnable"]:
            lines.append(f"{name:<28}not runnable: {result['not_runnable'][name]}")
            continue
        row = result[name]
        ratio = f"{ours / row['jobs_per_s']:.2f}x" if ours and name != "cogworker" else ""
        lines.append(
            f"{name:<28}{row['jobs_per_s']:>10,.0f}{row['workers_cpu_us_per_job']:>16.0f}"
            f"{row['redis_cpu_us_per_job']:>14.0f}{row['cpu_used_pct']:>12.0f}{ratio:>10}"
        )
    lines.append(
        f"  {result['jobs']:,} jobs per drain, timed by the queue from a tenth gone to empty; "
        "median of the runs, alternating systems."
    )
    return "\n".join(lines)
