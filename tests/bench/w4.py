"""W4: draining a backlog of `async def` jobs that each `await asyncio.sleep(0.05)` (jobkit.w4_job),
with WORKER_PROCESSES worker processes running ASYNC_PER_PROCESS jobs at once each, for every system
that runs async jobs (cogworker, dramatiq with its AsyncIO middleware, arq, SAQ).

Rate, as W1's: (jobs - 1) / (time the last job finished - time the first job finished), both taken by
the jobs. With 2 x 100 jobs asleep at once, 0.05 s each, no system can pass 4,000 jobs/s.

Every job records its own completion (jobkit.w4_job): after the last one the harness waits a moment
and checks that each of the jobs ran exactly once, in which processes, and how many were asleep at
once in each (the peak shows the concurrency setting took, or that the system's fetching never
filled it). Loop lag per job is how late its
0.05 s sleep woke: the same measure, taken the same way, in every system.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import jobkit
from context import Context
from procs import wait_for
from systems.base import ASYNC_PER_PROCESS, WORKER_PROCESSES, System

# After the last job: how long to keep watching for a job that runs a second time.
LATE_WATCH_S = 1.0


def w4(ctx: Context, system: System) -> dict[str, Any]:
    """W4: median of the runs, and every run's raw figures."""
    argv = system.w4_argv()
    assert argv is not None
    jobs = ctx.plan.w4_jobs
    runs = [w4_once(ctx, system, argv, jobs) for _ in range(ctx.plan.w4_runs)]
    summary: dict[str, Any] = {"jobs": jobs, "runs": runs, "config": system.w4_config}
    for key in ("jobs_per_s", "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "startup_s"):
        summary[key] = statistics.median(run[key] for run in runs)
    summary["exactly_once"] = all(run["exactly_once"] for run in runs)
    summary["processes"] = min(run["processes"] for run in runs)
    summary["peak_per_process"] = min(min(run["peak"].values(), default=0) for run in runs)
    return summary


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def w4_once(ctx: Context, system: System, argv: list[str], jobs: int) -> dict[str, Any]:
    ctx.redis.flush()
    system.push_w4(jobs)
    env = {**system.w4_env(), "BENCH_TARGET": str(jobs)}
    group = ctx.start(system, "w4", env, argv=argv)
    try:
        finished = lambda: bool(ctx.client.exists(jobkit.T_LAST))  # noqa: E731
        wait_for(finished, ctx.plan.w4_timeout_s, f"{jobs} W4 jobs", group)
        time.sleep(LATE_WATCH_S)
        client = ctx.client
        t_first = float(client.get(jobkit.T_FIRST) or 0)
        t_last = float(client.get(jobkit.T_LAST) or 0)
        runs = {int(k): int(v) for k, v in client.hgetall(jobkit.W4_RUNS).items()}
        lags = [float(v) for v in client.lrange(jobkit.W4_LAG, 0, -1)]
        pids = {int(k): int(v) for k, v in client.hgetall(jobkit.W4_PIDS).items()}
        peak = {int(k): int(v) for k, v in client.zrange(jobkit.W4_PEAK, 0, -1, withscores=True)}
    finally:
        stop_s = ctx.stop(group)
    missing = [i for i in range(jobs) if i not in runs]
    twice = {i: n for i, n in runs.items() if n != 1}
    return {
        "jobs": jobs,
        "jobs_per_s": (jobs - 1) / (t_last - t_first),
        "startup_s": t_first - group.started_at,
        "drain_s": t_last - t_first,
        "completions": sum(runs.values()),
        "missing": len(missing),
        "ran_more_than_once": len(twice),
        "exactly_once": not missing and not twice and len(runs) == jobs,
        "processes": len(pids),
        "jobs_per_process": pids,
        "peak": peak,
        "lag_p50_ms": _pct(lags, 50),
        "lag_p99_ms": _pct(lags, 99),
        "lag_max_ms": max(lags),
        "stop_s": stop_s,
    }


def check(result: dict[str, Any]) -> list[str]:
    """What a W4 result got wrong (empty: every job ran once, in 2 processes, 100 at once each)."""
    problems = []
    if not result["exactly_once"]:
        runs = result["runs"]
        problems += [
            f"run {i + 1} of {len(runs)}: {r['missing']} jobs never ran, {r['ran_more_than_once']} ran twice+"
            for i, r in enumerate(runs)
            if not r["exactly_once"]
        ]
    if result["processes"] != WORKER_PROCESSES:
        problems.append(f"jobs ran in {result['processes']} processes, not {WORKER_PROCESSES}")
    return problems


def shortfall(result: dict[str, Any]) -> str | None:
    """Said (not a fault of the run) when a process never had ASYNC_PER_PROCESS jobs asleep at once:
    the setting allows it, the system's own fetching never filled it."""
    if result["peak_per_process"] >= ASYNC_PER_PROCESS:
        return None
    return (
        f"a process had at most {result['peak_per_process']} jobs asleep at once (its setting allows "
        f"{ASYNC_PER_PROCESS}): its own fetching never filled every slot"
    )
