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

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import jobkit
from context import Context
from procs import WorkerGroup, cpu_seconds, wait_for
from redis_server import SCRIPT_COMMANDS, delta
from systems.base import System

# The backlog window's edges, in jobs done. The harness polls every 50 ms (procs.wait_for): finer
# polling cost the harness enough CPU to lower every system's figures. A late sample still falls
# inside the backlog, so the window's edges need no finer timing; the first-to-last window's end may
# take up to a poll of idle workers in (a few percent of a one-second drain, every system alike).
BACKLOG_MARKS = (0.1, 0.9)
_WINDOW = BACKLOG_MARKS[1] - BACKLOG_MARKS[0]


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


def summarize(jobs: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """W1: median of the runs, and every run's raw figures."""
    summary: dict[str, Any] = {"jobs": jobs, "runs": runs}
    for key in ("jobs_per_s", "startup_s", "commands_per_job", "script_calls_per_job"):
        summary[key] = statistics.median(run[key] for run in runs)
    for key in ("cpu_used_pct", "cpu_backlog_pct"):
        used = [run[key] for run in runs if run.get(key) is not None]
        summary[key] = statistics.median(used) if used else None
    summary["cpu_us_per_job"] = {
        kind: statistics.median(run["cpu_us_per_job"][kind] for run in runs)
        for kind in ("workers", "supervisor", "redis")
    }
    return summary


def drain_once(
    ctx: Context, system: System, jobs: int, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    ctx.redis.flush()
    system.push_noop_bulk(jobs)
    polls = counts = 0
    steady: CpuSample | None = None
    # The backlog window: from a tenth of the jobs done to nine tenths, while every worker has jobs
    # waiting (the first jobs run while a process may still be starting, the last ones while the
    # queue runs dry and threads go idle).
    backlog: dict[float, CpuSample] = {}

    def finished() -> bool:
        # Until the first job is done, poll for it and take the CPU sample the steady window starts at.
        nonlocal polls, counts, steady
        polls += 1
        if steady is None:
            if ctx.client.exists(jobkit.T_FIRST):
                steady = CpuSample.take(ctx, group)
            return False
        if len(backlog) < len(BACKLOG_MARKS):
            counts += 1
            done_now = ctx.done()
            for mark in BACKLOG_MARKS:
                if mark not in backlog and done_now >= mark * jobs:
                    backlog[mark] = CpuSample.take(ctx, group)
        return bool(ctx.client.exists(jobkit.T_LAST))

    before = ctx.redis.commandstats()
    cpu_before = ctx.redis.cpu_s()
    group = ctx.start(system, "w1", {"BENCH_TARGET": str(jobs), **(extra_env or {})})
    try:
        wait_for(finished, ctx.plan.w1_timeout_s, f"{jobs} jobs to finish", group)
        ended = CpuSample.take(ctx, group)
        cpu_after = ctx.redis.cpu_s()
        after = ctx.redis.commandstats()
        done = ctx.done()
        t_first = float(ctx.client.get(jobkit.T_FIRST) or 0)
        t_last = float(ctx.client.get(jobkit.T_LAST) or 0)
    finally:
        stop_s = ctx.stop(group)
    calls = own_commands(
        delta(before, after), done=done, polls=polls, counts=counts, done_command=system.done_command
    )
    start, end = (backlog.get(mark) for mark in BACKLOG_MARKS)
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
        # CPU per job by process kind, from launch to the last job (start-up included).
        "cpu_us_per_job": {
            "workers": ended.workers * 1e6 / jobs,
            "supervisor": ended.parent * 1e6 / jobs,
            "redis": (ended.redis - cpu_before) * 1e6 / jobs,
        },
        # Share of the machine's CPUs the system's processes and Redis used between the first and
        # the last job done: 100 % means nothing waited.
        "cpu_used_pct": ended.used_pct_since(steady) if steady is not None else None,
        # The same from a tenth of the jobs done to nine tenths: under a backlog.
        "cpu_backlog_pct": end.used_pct_since(start) if start is not None and end is not None else None,
        # The workers' CPU per job in that window, start-up and the drain's tail left out.
        "backlog_workers_cpu_us_per_job": (end.workers - start.workers) * 1e6 / (jobs * _WINDOW)
        if start is not None and end is not None
        else None,
    }


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds so far of a worker command's processes, split by kind, and of Redis."""

    at: float
    workers: float
    parent: float
    redis: float

    @classmethod
    def take(cls, ctx: Context, group: WorkerGroup) -> CpuSample:
        workers = [proc for child in group.children() for proc in group.subtree(child)]
        assert group.parent is not None
        parent = [group.parent, *(p for h in group.helpers() for p in group.subtree(h))]
        return cls(time.monotonic(), cpu_seconds(workers), cpu_seconds(parent), ctx.redis.cpu_s())

    def by_kind(self) -> dict[str, float]:
        return {"workers": self.workers, "supervisor": self.parent, "redis": self.redis}

    def used_pct_since(self, start: CpuSample) -> float:
        busy = sum(self.by_kind().values()) - sum(start.by_kind().values())
        return 100.0 * busy / ((self.at - start.at) * (os.cpu_count() or 1))


def own_commands(
    calls: dict[str, int], *, done: int, polls: int, counts: int = 0, done_command: str = "incrby"
) -> dict[str, int]:
    """The system's own commands in a drain window: the jobs' reporting and our polls (EXISTS, and GET
    of the done counter) taken out. `done_command` is how the jobs' client sends INCR (redis-py:
    INCRBY key 1; redis-rb: INCR)."""
    ours = {done_command: done, "set": 2, "exists": polls, "get": counts}
    own = dict(calls)
    for name, count in ours.items():
        own[name] = own.get(name, 0) - count
        if own[name] < 0:
            raise RuntimeError(f"commandstats shows fewer {name} calls than the harness made itself")
    return {name: n for name, n in own.items() if n}
