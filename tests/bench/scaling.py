"""`scaling` in `make bench` (issue 17 §5): how far one Redis goes for cogworker's command mix.

W1's drain (no-op jobs that each do one INCR) with COGWORKER_COUNT = 1, 2, 4 and 8 worker processes
(COGWORKER_CONCURRENCY 8 each) against the one private Redis: throughput, Redis's own CPU per job
(INFO cpu, user + system, from the workers' start to the last job) and Redis commands per job. With
Redis's CPU per job known, one Redis's ceiling is 1 / (CPU seconds per job) jobs/s once it has a core
to itself (docs/deployment/scaling.md works it through). On a machine with fewer cores than processes
the workers and Redis share the cores, so past that point the table shows the machine's limit, not
Redis's: the CPU-per-job column is what carries over to a bigger machine.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import systems
from context import Context
from throughput import drain_once, w1_job_count

COUNTS = (1, 2, 4, 8)
FIGURES = ("jobs_per_s", "commands_per_job", "redis_cpu_us_per_job")


def scaling(ctx: Context, say: Callable[[str], None]) -> dict[str, Any]:
    system = systems.load("cogworker", ctx.redis.url)
    try:
        jobs = w1_job_count(ctx, system)
        rows: dict[str, Any] = {}
        for count in COUNTS:
            say(f"scaling: {count} worker process(es) ...")
            env = {"COGWORKER_COUNT": str(count)}
            runs = [drain_once(ctx, system, jobs, env) for _ in range(ctx.plan.w1_runs)]
            row: dict[str, Any] = {key: statistics.median(run[key] for run in runs) for key in FIGURES}
            row["runs"] = runs
            rows[str(count)] = row
        return {"jobs": jobs, "rows": rows}
    finally:
        system.close()


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'scaling: cogworker, one Redis':<34}{'jobs/s':>10}{'Redis cmds/job':>16}{'Redis CPU µs/job':>18}",
        "-" * 78,
    ]
    for count, row in result["rows"].items():
        lines.append(
            f"{count + ' worker process(es) x 8 threads':<34}{row['jobs_per_s']:>10,.0f}"
            f"{row['commands_per_job']:>16.2f}{row['redis_cpu_us_per_job']:>18.1f}"
        )
    lines.append(
        f"  {result['jobs']:,} no-op jobs per drain, median of the runs; Redis's CPU is its own INFO cpu."
    )
    return "\n".join(lines)
