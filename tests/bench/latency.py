"""W2: how long an idle worker takes to start a job pushed to it.

Jobs are pushed one at a time, a fixed gap apart, to workers that have sat idle long enough to be
at their idle polling pace. Each job carries its push time and reports (start - push) itself.
"""

from __future__ import annotations

import math
import time
from typing import Any

import jobkit
from context import Context
from procs import WorkerGroup, wait_for
from systems.base import System


def pickup_latency(ctx: Context, system: System, group: WorkerGroup) -> dict[str, Any]:
    ctx.reset_bench_keys()
    jobs, gap_s = ctx.plan.w2_jobs, ctx.plan.w2_gap_s
    began = time.monotonic()
    for index in range(jobs):
        # Paced against the start, not the previous push, so slow pushes don't stretch the run.
        time.sleep(max(0.0, began + index * gap_s - time.monotonic()))
        system.push_pickup(time.time())
    wait_for(lambda: ctx.client.llen(jobkit.LATENCY) >= jobs, 60, f"{jobs} pickups", group)
    values = sorted(float(v) for v in ctx.client.lrange(jobkit.LATENCY, 0, -1))
    return {
        "jobs": jobs,
        "gap_ms": gap_s * 1000,
        "p50_ms": percentile(values, 50),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "max_ms": values[-1],
    }


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile: always one of the measured values, never an interpolation."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]
