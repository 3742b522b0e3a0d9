"""`tests/bench/run.sh --only profile` (not in the default run: it needs Linux's `perf`): what W1's
workers spend per job besides running code, unpinned and pinned, cogworker against Sidekiq + YJIT.

W1's job body is one INCR through the language's own Redis client. CPython releases the GIL around
every socket call (the send as well as the wait for the reply); with 8 job threads another one is
always waiting for it, so each call hands the GIL over: a futex wake, a futex wait, and a switch to a
thread that the kernel may wake on the other core, where it waits for that core while this one idles.
Ruby's client sends and reads without giving up its lock unless it must wait.

For each system, default and pinned (its W1 variant: each worker process on a CPU of its own), a
backlog of JOBS no-op jobs is drained. Once a tenth is done, `perf stat` counts for WINDOW_S the
worker processes' system calls, futex calls and context switches (the scheduler switching away from
one of their threads), and /proc their CPU time and Redis's; each is divided by the jobs done in that
window. README "Performance" quotes it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobkit
import systems
from context import Context
from procs import wait_for
from throughput import CpuSample

SYSTEMS = ("cogworker", "sidekiq-yjit")
JOBS = 80_000
QUICK_JOBS = 20_000
WINDOW_S = 3.0
EVENTS = {
    "syscalls": "raw_syscalls:sys_enter",
    "futex": "syscalls:sys_enter_futex",
    "switches": "sched:sched_switch",
}


def gil_profile(ctx: Context, say: Callable[[str], None]) -> dict[str, Any]:
    """{label: figures} per system and variant, or {"not_runnable": why} without perf."""
    if shutil.which("perf") is None:
        return {"not_runnable": "perf not found (Debian: apt-get install linux-perf)"}
    jobs = QUICK_JOBS if ctx.plan.quick else JOBS
    window_s = WINDOW_S / 3 if ctx.plan.quick else WINDOW_S
    result: dict[str, Any] = {"jobs": jobs, "window_s": window_s, "rows": {}}
    for name in SYSTEMS:
        try:
            system = systems.load(name, ctx.redis.url)
        except Exception as exc:  # no sidekiq on this machine: its row says why
            result["rows"][name] = {"not_runnable": f"{type(exc).__name__}: {exc}"}
            continue
        try:
            for variant, env in [("", {}), *system.w1_variants().items()]:
                label = f"{name} ({variant})" if variant else name
                say(f"profile: {label} ...")
                try:
                    result["rows"][label] = _profile(ctx, system, jobs, window_s, env)
                finally:
                    ctx.kill_all()
        finally:
            system.close()
    return result


def _profile(ctx: Context, system: Any, jobs: int, window_s: float, env: dict[str, str]) -> dict[str, Any]:
    ctx.redis.flush()
    system.push_noop_bulk(jobs)
    group = ctx.start(system, "profile", {"BENCH_TARGET": str(jobs), **env})
    try:
        wait_for(lambda: _done(ctx) >= jobs // 10, 120.0, "a tenth of the jobs", group, step_s=0.005)
        workers = [proc.pid for child in group.children() for proc in group.subtree(child)]
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "perf.csv"
            start, done_before = CpuSample.take(ctx, group), _done(ctx)
            # perf attaches to every thread of the workers, then counts while `sleep` runs: the window.
            events, pids = ",".join(EVENTS.values()), ",".join(map(str, workers))
            window = ["--", "sleep", str(window_s)]
            subprocess.run(
                ["perf", "stat", "-x,", "-o", str(out), "-e", events, "-p", pids, *window],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=window_s + 60,
            )
            end, done_after = CpuSample.take(ctx, group), _done(ctx)
            counts = _read_perf(out.read_text())
    finally:
        ctx.stop(group)
    if done_after >= jobs:
        raise RuntimeError("the backlog ran out inside the window: raise JOBS")
    ran = done_after - done_before
    rate = ran / (end.at - start.at)
    figures: dict[str, Any] = {
        "jobs_per_s": rate,
        "cpu_used_pct": end.used_pct_since(start),
        "workers_cpu_us_per_job": (end.workers - start.workers) * 1e6 / ran,
        "redis_cpu_us_per_job": (end.redis - start.redis) * 1e6 / ran,
    }
    for key, event in EVENTS.items():
        # perf counted for window_s exactly; our samples also span its start-up, so the jobs it saw
        # are the steady rate times its window.
        figures[f"{key}_per_job"] = counts.get(event, 0) / (rate * window_s)
    return figures


def _done(ctx: Context) -> int:
    return int(ctx.client.get(jobkit.DONE) or 0)


def _read_perf(text: str) -> dict[str, int]:
    """`perf stat -x,` lines: count, unit, event name, ...; comments and unsupported events skipped."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit():
            counts[fields[2]] = int(fields[0])
    return counts


def table(result: dict[str, Any]) -> str:
    if "not_runnable" in result:
        return f"profile: not runnable: {result['not_runnable']}"
    header = (
        f"{'W1 steady window, 2 x 8':<26}{'jobs/s':>9}{'CPU used %':>12}{'workers µs':>12}{'Redis µs':>10}"
        f"{'syscalls':>10}{'futex':>8}{'switches':>10}"
    )
    lines = [header, "-" * len(header)]
    for label, row in result["rows"].items():
        if "not_runnable" in row:
            lines.append(f"{label:<26}not runnable: {row['not_runnable']}")
            continue
        lines.append(
            f"{label:<26}{row['jobs_per_s']:>9,.0f}{row['cpu_used_pct']:>12.0f}"
            f"{row['workers_cpu_us_per_job']:>12.0f}{row['redis_cpu_us_per_job']:>10.0f}"
            f"{row['syscalls_per_job']:>10.1f}{row['futex_per_job']:>8.1f}{row['switches_per_job']:>10.1f}"
        )
    lines.append(
        f"  per job, the workers' figures over {result['window_s']:.0f} s of a drain of "
        f"{result['jobs']:,} jobs once a tenth was done (perf stat); pinned: each worker process on a "
        "CPU of its own."
    )
    return "\n".join(lines)
