"""Latency under load: push-to-start p50/p99 while a steady stream runs at 10, 50 and 90 % of the drain
rate measured in the same run.

Each round, for each system in turn: W1's drain of a backlog (throughput.drain_once, the default 2
processes x 8 threads) gives its drain rate; then fresh workers of the same size, and for each load a
separate process (pacer.py) pushes the load-curve job (jobkit.record_paced) at that share of the rate
for STREAM_S, each job carrying its push time. The job records when it started; the first WARMUP_S of
the stream is left out. The pacer's CPU is on the same 2 cores, so 90 % of a drain rate measured
without it is more than 90 % of what is left: a system that falls behind shows it in its p99.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import jobkit
import systems
from context import Context
from curve import Curve, Metric, Target
from latency import percentile
from pacer import PACER
from procs import NotRunnable, WorkerGroup, wait_for
from redis_server import delta
from systems.base import System
from throughput import CpuSample, drain_once, w1_job_count

TITLE = "latency under load: push-to-start p50/p99 at 10, 50 and 90 % of the drain rate"

SERIES = {"cogworker": "cogworker", "sidekiq-yjit": "Sidekiq + YJIT", "dramatiq": "Dramatiq"}
LOADS_PCT = (10, 50, 90)
STREAM_S = 6.0
QUICK_STREAM_S = 3.0
WARMUP_S = 1.0
ROUNDS = 3
PACER_PY = Path(__file__).resolve().parents[1] / "pacer.py"
TARGET_P99_MS = 5.0

METRICS = [
    Metric("p50_ms", "push-to-start p50", "ms", "↓", log=True),
    Metric("p99_ms", "push-to-start p99", "ms", "↓", log=True),
    Metric("worker_cpu_us_per_job", "worker CPU per job", "µs", "↓"),
    Metric("redis_cpu_us_per_job", "Redis CPU per job", "µs", "↓"),
    Metric("commands_per_job", "Redis commands per job", "", "↓"),
]


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    curve = Curve("load", "Latency under load", "load (% of the drain rate measured in the run)", METRICS)
    loaded: dict[str, System] = {}
    for name in SERIES:
        try:
            loaded[name] = systems.load(name, ctx.redis.url)
        except Exception as exc:
            curve.notes.append(f"{SERIES[name]}: not runnable: {type(exc).__name__}: {exc}")
    drains: dict[str, list[float]] = {name: [] for name in loaded}
    broken: set[str] = set()
    try:
        for index in range(1 if ctx.plan.quick else ROUNDS):
            for name, system in loaded.items():
                if name in broken:
                    continue
                say(f"load: {SERIES[name]} round {index + 1} ...")
                try:
                    drain = drain_once(ctx, system, w1_job_count(ctx, system))["jobs_per_s"]
                    drains[name].append(drain)
                    for pct, figures in stream(ctx, system, drain).items():
                        curve.add(SERIES[name], pct, **figures)
                except NotRunnable as exc:
                    broken.add(name)
                    curve.notes.append(f"{SERIES[name]}: not runnable: {exc}")
                except Exception as exc:
                    failed = f"{type(exc).__name__}: {exc}"
                    curve.notes.append(f"{SERIES[name]} round {index + 1}: failed: {failed}")
                finally:
                    ctx.kill_all()
    finally:
        for system in loaded.values():
            system.close()
    rates = ", ".join(f"{SERIES[n]} {sorted(r)[len(r) // 2]:,.0f}" for n, r in drains.items() if r)
    stream_s = QUICK_STREAM_S if ctx.plan.quick else STREAM_S
    curve.notes.append(f"Drain rates (W1, 2 processes x 8 threads, median of the rounds), jobs/s: {rates}.")
    curve.notes.append(
        f"Each load: {stream_s:.0f} s of stream from pacer.py, the first {WARMUP_S:.0f} s left out; one job "
        "per push below ~1,000 jobs/s, above it the jobs due in the last millisecond per push (the system's "
        "bulk path; Dramatiq has none and sends each). CPU and commands are over the stream, the jobs' RPUSH "
        "left out."
    )
    p99 = curve.value("cogworker", 50, "p99_ms")
    curve.targets.append(
        Target(
            f"cogworker p99 ≤ {TARGET_P99_MS:.0f} ms at 50 % load",
            None if p99 is None else p99 <= TARGET_P99_MS,
            "no figure" if p99 is None else f"p99 {p99:.2f} ms",
        )
    )
    return [curve]


def stream(
    ctx: Context, system: System, drain: float, env: dict[str, str] | None = None
) -> dict[int, dict[str, float | None]]:
    """Fresh workers; for each load, a paced stream and its figures."""
    ctx.redis.flush()
    group = ctx.start(system, "load", env)
    results: dict[int, dict[str, float | None]] = {}
    try:
        ctx.wait_ready(system, group)
        for pct in LOADS_PCT:
            results[pct] = paced(ctx, system, group, drain * pct / 100)
    finally:
        ctx.stop(group)
    return results


def paced(ctx: Context, system: System, group: WorkerGroup, rate: float) -> dict[str, float | None]:
    client = ctx.client
    client.delete(jobkit.PACED, PACER)
    seconds = QUICK_STREAM_S if ctx.plan.quick else STREAM_S
    commands_before = ctx.redis.commandstats()
    start = CpuSample.take(ctx, group)
    argv = [sys.executable, str(PACER_PY), system.name, f"{rate:.3f}", f"{seconds}"]
    pacer = ctx.start(system, "pacer", argv=argv)
    wait_for(lambda: pacer.exit_code() is not None, seconds + 30, "the pacer", group)
    if pacer.exit_code() != 0:
        raise RuntimeError(f"pacer.py exited with {pacer.exit_code()}: {pacer.log_tail()}")
    pushed = int(client.hget(PACER, "pushed") or 0)
    polls = 0

    def all_ran() -> bool:
        nonlocal polls
        polls += 1
        return int(client.llen(jobkit.PACED)) >= pushed

    wait_for(all_ran, 120, f"{pushed:,} paced jobs", group)
    end = CpuSample.take(ctx, group)
    commands = delta(commands_before, ctx.redis.commandstats())
    began = float(client.hget(PACER, "began") or 0)
    lines = [line.split() for line in client.lrange(jobkit.PACED, 0, -1)]
    latencies = sorted(float(ms) for at, ms in lines if float(at) >= began + WARMUP_S)
    # The jobs' RPUSHes and the harness's own commands (LLEN polls, the pacer's report and its reading) apart.
    for name, count in {"rpush": pushed, "llen": polls, "hset": 1, "hget": 1}.items():
        commands[name] = commands.get(name, 0) - count
    own = sum(max(0, n) for n in commands.values())
    return {
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "rate": rate,
        "worker_cpu_us_per_job": (end.workers - start.workers) * 1e6 / pushed,
        "redis_cpu_us_per_job": (end.redis - start.redis) * 1e6 / pushed,
        "commands_per_job": own / pushed,
    }
