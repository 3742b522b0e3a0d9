"""W1 (draining a backlog), the enqueue rates, and Redis commands per job.

Drain rate, one definition for every system: (jobs - 1) / (time the last job finished - time the
first job finished), both times taken by the jobs themselves (jobkit.mark_done). Starting from the
first finished job leaves out interpreter start-up and imports, which differ by CLI and say nothing
about steady throughput; start-up is reported on its own line instead (worker command to first job).

"Done" is a counter every no-op job bumps on the bench Redis (INCR bench:done). The systems' own
counters differ (dramatiq and celery keep none in Redis), and a queue length says a job was fetched,
not finished. The INCR is one extra round trip per job for every system alike, and it is taken out
of the commands-per-job figure, as are the harness's own polls.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import jobkit
from context import Context
from procs import wait_for
from redis_server import SCRIPT_COMMANDS, delta
from systems.base import System


def enqueue_rates(ctx: Context, system: System) -> dict[str, Any]:
    """Jobs/s pushing one at a time, and through the system's bulk path; nothing runs them."""
    ctx.redis.flush()
    single = ctx.plan.single_pushes
    began = time.perf_counter()
    for _ in range(single):
        system.push_noop()
    single_s = time.perf_counter() - began
    ctx.redis.flush()
    bulk = ctx.plan.bulk_pushes
    began = time.perf_counter()
    system.push_noop_bulk(bulk)
    bulk_s = time.perf_counter() - began
    ctx.redis.flush()
    return {
        "single_jobs": single,
        "single_jobs_per_s": single / single_s,
        "bulk_jobs": bulk,
        "bulk_jobs_per_s": bulk / bulk_s,
        "bulk_method": system.bulk_label,
    }


def w1_job_count(ctx: Context, system: System) -> int:
    return max(100, round(ctx.plan.w1_jobs * system.w1_share))


def drain(ctx: Context, system: System) -> dict[str, Any]:
    """W1: median of the runs, and every run's raw figures."""
    jobs = w1_job_count(ctx, system)
    runs = [drain_once(ctx, system, jobs) for _ in range(ctx.plan.w1_runs)]
    summary: dict[str, Any] = {"jobs": jobs, "runs": runs}
    for key in ("jobs_per_s", "startup_s", "commands_per_job", "script_calls_per_job"):
        summary[key] = statistics.median(run[key] for run in runs)
    return summary


def drain_once(
    ctx: Context, system: System, jobs: int, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    ctx.redis.flush()
    system.push_noop_bulk(jobs)
    polls = 0

    def finished() -> bool:
        nonlocal polls
        polls += 1
        return bool(ctx.client.exists(jobkit.T_LAST))

    before = ctx.redis.commandstats()
    cpu_before = ctx.redis.cpu_s()
    group = ctx.start(system, "w1", {"BENCH_TARGET": str(jobs), **(extra_env or {})})
    try:
        wait_for(finished, ctx.plan.w1_timeout_s, f"{jobs} jobs to finish", group)
        cpu_after = ctx.redis.cpu_s()
        after = ctx.redis.commandstats()
        done = ctx.done()
        t_first = float(ctx.client.get(jobkit.T_FIRST) or 0)
        t_last = float(ctx.client.get(jobkit.T_LAST) or 0)
    finally:
        stop_s = ctx.stop(group)
    calls = own_commands(delta(before, after), done=done, polls=polls, done_command=system.done_command)
    return {
        "jobs": jobs,
        "jobs_per_s": (jobs - 1) / (t_last - t_first),
        "startup_s": t_first - group.started_at,
        "drain_s": t_last - t_first,
        "ran": done,
        "stop_s": stop_s,
        "commands_per_job": sum(calls.values()) / jobs,
        "script_calls_per_job": sum(n for c, n in calls.items() if c in SCRIPT_COMMANDS) / jobs,
        # Redis's own CPU (user + system) from the workers' start to the last job, per job.
        "redis_cpu_us_per_job": (cpu_after - cpu_before) * 1e6 / jobs,
        "commands": calls,
    }


def own_commands(
    calls: dict[str, int], *, done: int, polls: int, done_command: str = "incrby"
) -> dict[str, int]:
    """The system's own commands in a drain window: the jobs' reporting and our polls taken out.
    `done_command` is how the jobs' client sends INCR (redis-py: INCRBY key 1; redis-rb: INCR)."""
    ours = {done_command: done, "set": 2, "exists": polls}
    own = dict(calls)
    for name, count in ours.items():
        own[name] = own.get(name, 0) - count
        if own[name] < 0:
            raise RuntimeError(f"commandstats shows fewer {name} calls than the harness made itself")
    return {name: n for name, n in own.items() if n}
