"""`limiter` in make bench (issue 19 §3): what a concurrent limiter costs a job.

W1's drain (no-op jobs that each do one INCR, cogworker's swarm of 2 x 8) run plain and with the job
behind `@job(limit=cogworker.limiter.concurrent("bench", 10_000))`, a limit far above the 16 jobs
that can run at once, so it never turns a job away: the difference is the check itself. The runs
alternate (plain, limited, plain, ...) so a machine shared with other work slows both alike.
Figures: throughput of each (median of the runs), the loss in %, and the extra Redis script calls
per job (each limiter call is one script call, so one round trip: the acquire, and the releases,
which a worker batches, api/limit_release.py) and extra commands per job (those the scripts run).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import systems
from context import Context
from systems.base import System
from throughput import drain_once, w1_job_count

import cogworker

FIGURES = ("jobs_per_s", "commands_per_job", "script_calls_per_job")


class _Limited:
    """cogworker as the harness knows it, pushing W1's job behind the limiter instead."""

    def __init__(self, system: System) -> None:
        self._system = system
        import jobs_cogworker

        self._job = jobs_cogworker.noop_limited

    def __getattr__(self, name: str) -> Any:
        return getattr(self._system, name)

    def push_noop_bulk(self, count: int) -> None:
        cogworker.push_bulk(self._job, [() for _ in range(count)])


def limiter_overhead(ctx: Context, say: Callable[[str], None]) -> dict[str, Any]:
    system = systems.load("cogworker", ctx.redis.url)
    limited: Any = _Limited(system)
    try:
        jobs = w1_job_count(ctx, system)
        runs: dict[str, list[dict[str, Any]]] = {"plain": [], "limited": []}
        for index in range(ctx.plan.w1_runs):
            say(
                f"limiter: W1 run {index + 1} of {ctx.plan.w1_runs}, plain then with a concurrent limiter ..."
            )
            runs["plain"].append(drain_once(ctx, system, jobs))
            runs["limited"].append(drain_once(ctx, limited, jobs))
        result: dict[str, Any] = {"jobs": jobs, "runs": runs}
        for kind, kind_runs in runs.items():
            result[kind] = {key: statistics.median(run[key] for run in kind_runs) for key in FIGURES}
        plain, with_limit = result["plain"], result["limited"]
        result["loss_pct"] = 100.0 * (1 - with_limit["jobs_per_s"] / plain["jobs_per_s"])
        result["extra_script_calls_per_job"] = (
            with_limit["script_calls_per_job"] - plain["script_calls_per_job"]
        )
        result["extra_commands_per_job"] = with_limit["commands_per_job"] - plain["commands_per_job"]
        return result
    finally:
        system.close()


def table(result: dict[str, Any]) -> str:
    plain, limited = result["plain"], result["limited"]
    lines = [
        f"{'limiter: cogworker W1, 2 x 8':<40}{'jobs/s':>10}{'script calls/job':>18}{'cmds/job':>10}",
        "-" * 78,
        f"{'plain':<40}{plain['jobs_per_s']:>10,.0f}{plain['script_calls_per_job']:>18.2f}"
        f"{plain['commands_per_job']:>10.2f}",
        f"{'@job(limit=concurrent(..., 10_000))':<40}{limited['jobs_per_s']:>10,.0f}"
        f"{limited['script_calls_per_job']:>18.2f}{limited['commands_per_job']:>10.2f}",
        f"  throughput loss {result['loss_pct']:.1f} %; extra round trips (script calls) per job "
        f"{result['extra_script_calls_per_job']:.2f}; {result['jobs']:,} jobs per drain, median of the runs.",
    ]
    return "\n".join(lines)
