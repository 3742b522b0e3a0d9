"""W4: draining a backlog of `async def` jobs (jobkit.w4_job), with WORKER_PROCESSES worker processes
running ASYNC_PER_PROCESS jobs at once each, for every system that runs async jobs (cogworker,
dramatiq with its AsyncIO middleware, arq, SAQ). Two bodies (jobkit.W4_BODIES), each its own row:
`sleep` awaits asyncio.sleep(0.005); `redis` makes one real async round trip (an INCR).

The ceiling is far away: with 2 x 500 jobs asleep at once, 5 ms each, 200,000 jobs/s; what limits a
system is its own cost per job (fetch, hand-off, middleware, settle) and how full it keeps its slots.

Like W1, W4 runs in rounds (`w4_rounds`): each round drains the backlog once per system and body, in
the same order, so a drift in the machine's speed falls on every system alike; each figure is the
median of a system's own runs.

Rate, as W1's: (jobs - 1) / (time the last job finished - time the first job finished), both taken by
the jobs. Every job records its own completion: after the last one the harness waits a moment and
checks that each of the jobs ran exactly once, in which processes, and how many were in their body
at once in each (the peak shows the concurrency setting took, or that the system's fetching never
filled it). Loop lag per job is taken inside the job, the same way in every system (jobkit.w4_job).
CPU per job is the worker processes' (user + system, from launch to the last job, start-up
included) and Redis's over the same window; Redis commands per job leave out the jobs' reporting
and the harness's polls.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import jobkit
import systems
from context import Context
from curve import Curve, Metric, Target
from procs import NotRunnable, wait_for
from redis_server import delta
from systems.base import ASYNC_PER_PROCESS, WORKER_PROCESSES, System
from throughput import CpuSample

# After the last job: how long to keep watching for a job that runs a second time.
LATE_WATCH_S = 1.0
# The result key of each body's summary in a system's results.
RESULT_KEYS = {"sleep": "w4", "redis": "w4_redis"}
FIGURES = (
    "jobs_per_s",
    "lag_p50_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "startup_s",
    "workers_cpu_us_per_job",
    "redis_cpu_us_per_job",
    "commands_per_job",
)


def w4_rounds(ctx: Context, names: Iterable[str], say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Per system that has W4: {"w4": summary, "w4_redis": summary, "w4_problems": [...],
    "w4_shortfall": ...}, or {"not_runnable": why}, or {"errors": {"w4": why}}."""
    loaded: dict[str, System] = {}
    outcome: dict[str, dict[str, Any]] = {}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for name in names:
            try:
                system = systems.load(name, ctx.redis.url)
            except Exception:  # measure() loads it again and reports why
                continue
            if system.w4_argv() is None:
                system.close()
                continue
            loaded[name] = system
            for body in jobkit.W4_BODIES:
                runs[name, body] = []
        for index in range(ctx.plan.w4_runs):
            for name, system in loaded.items():
                for body in jobkit.W4_BODIES:
                    if name in outcome:
                        continue
                    say(f"{name}: w4 ({body}) run {index + 1} of {ctx.plan.w4_runs} ...")
                    began = time.monotonic()
                    try:
                        runs[name, body].append(w4_once(ctx, system, body, ctx.plan.w4_jobs))
                    except NotRunnable as exc:
                        outcome[name] = {"not_runnable": f"{name} not runnable: {exc}"}
                    except Exception as exc:
                        outcome[name] = {"errors": {"w4": f"{type(exc).__name__}: {exc}"}}
                    finally:
                        ctx.kill_all()  # a run that failed half-way may have left its workers up
                    say(f"{name}: w4 ({body}) run took {time.monotonic() - began:.1f} s")
    finally:
        for system in loaded.values():
            system.close()
    for name, system in loaded.items():
        if name in outcome:
            continue
        found: dict[str, Any] = {"w4_problems": [], "w4_shortfall": None}
        for body in jobkit.W4_BODIES:
            summary = summarize(runs[name, body], system.w4_config)
            found[RESULT_KEYS[body]] = summary
            found["w4_problems"] += [f"({body}) {problem}" for problem in check(summary)]
            found["w4_shortfall"] = found["w4_shortfall"] or shortfall(summary)
        outcome[name] = found
    return outcome


def summarize(runs: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """Median of the runs, and every run's raw figures."""
    summary: dict[str, Any] = {"jobs": runs[0]["jobs"], "runs": runs, "config": config}
    for key in FIGURES:
        summary[key] = statistics.median(run[key] for run in runs)
    summary["exactly_once"] = all(run["exactly_once"] for run in runs)
    summary["processes"] = min(run["processes"] for run in runs)
    summary["peak_per_process"] = min(min(run["peak"].values(), default=0) for run in runs)
    return summary


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def w4_once(ctx: Context, system: System, body: str, jobs: int) -> dict[str, Any]:
    argv = system.w4_argv()
    assert argv is not None
    ctx.redis.flush()
    system.push_w4(jobs)
    env = {**system.w4_env(), "BENCH_TARGET": str(jobs), "BENCH_W4_BODY": body}
    polls = 0

    def finished() -> bool:
        nonlocal polls
        polls += 1
        return bool(ctx.client.exists(jobkit.T_LAST))

    before = ctx.redis.commandstats()
    redis_before = ctx.redis.cpu_s()
    group = ctx.start(system, f"w4-{body}", env, argv=argv)
    try:
        wait_for(finished, ctx.plan.w4_timeout_s, f"{jobs} W4 jobs", group)
        ended = CpuSample.take(ctx, group)
        after = ctx.redis.commandstats()
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
    calls = _own_commands(delta(before, after), jobs, body, polls, system.done_command)
    return {
        "jobs": jobs,
        "body": body,
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
        "workers_cpu_us_per_job": ended.workers * 1e6 / jobs,
        "redis_cpu_us_per_job": (ended.redis - redis_before) * 1e6 / jobs,
        "commands_per_job": sum(calls.values()) / jobs,
        "commands": calls,
        "stop_s": stop_s,
    }


def _own_commands(
    calls: dict[str, int], jobs: int, body: str, polls: int, done_command: str
) -> dict[str, int]:
    """The system's own commands: the jobs' reporting (jobkit.w4_job), the `redis` body's INCR and
    the harness's polls taken out. The jobs' ZADDs of a new peak stay in (one each time a process's
    peak rises: at most 2 x 500 in a run, 0.05 per job at 20,000 jobs): some systems ZADD their own."""
    ours = {
        done_command: jobs * (2 if body == "redis" else 1),
        "hincrby": 2 * jobs,
        "rpush": jobs,
        "set": 2,
        "exists": polls,
    }
    own = dict(calls)
    for name, count in ours.items():
        own[name] = max(0, own.get(name, 0) - count)
    return {name: n for name, n in own.items() if n}


def check(result: dict[str, Any]) -> list[str]:
    """What a W4 result got wrong (empty: every job ran once, in 2 processes)."""
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
    """Said (not a fault of the run) when a process never had ASYNC_PER_PROCESS jobs in their body at
    once: the setting allows it, the system's own fetching never filled it."""
    if result["peak_per_process"] >= ASYNC_PER_PROCESS:
        return None
    return (
        f"a process had at most {result['peak_per_process']} jobs in their body at once (its setting "
        f"allows {ASYNC_PER_PROCESS}): its own fetching never filled every slot"
    )


# The series names of the curve (plot.py colours them by these).
SERIES = {"cogworker": "cogworker", "dramatiq": "Dramatiq AsyncIO", "arq": "arq", "saq": "SAQ"}
BODY_LABELS = {"sleep": "sleep 5 ms", "redis": "async INCR"}
TARGET_RATIO = 1.5
TARGET_LAG_P99_MS = 10.0


def curve(found: dict[str, dict[str, Any]]) -> Curve:
    """W4 as a curve (drawn beside the run's JSON, and on the docs' benchmarks page): one point per
    run, x the job's body, a series per system; the issue's two targets judged on its medians."""
    drawn = Curve(
        name="w4",
        title="W4: async jobs, 2 processes x 500 at once",
        x_label="job body",
        metrics=[
            Metric("jobs_per_s", "throughput", "jobs/s", "↑"),
            Metric("lag_p99_ms", "loop lag p99", "ms", "↓", log=True),
            Metric("lag_p50_ms", "loop lag p50", "ms", "↓", log=True),
            Metric("workers_cpu_us_per_job", "worker CPU per job", "µs", "↓"),
            Metric("redis_cpu_us_per_job", "Redis CPU per job", "µs", "↓"),
            Metric("commands_per_job", "Redis commands per job", "commands", "↓"),
        ],
    )
    for name, result in found.items():
        for body in jobkit.W4_BODIES:
            summary = result.get(RESULT_KEYS[body])
            for run in summary["runs"] if summary else []:
                drawn.add(
                    SERIES.get(name, name), BODY_LABELS[body], **{m.key: run[m.key] for m in drawn.metrics}
                )
    for body in jobkit.W4_BODIES:
        x = BODY_LABELS[body]
        ours = drawn.value("cogworker", x, "jobs_per_s")
        peers = {
            s: v for s in drawn.series_names() if s != "cogworker" and (v := drawn.value(s, x, "jobs_per_s"))
        }
        best = max(peers, key=lambda s: peers[s]) if peers else None
        ratio = ours / peers[best] if ours is not None and best is not None else None
        drawn.targets.append(
            Target(
                f"{x}: throughput >= {TARGET_RATIO}x the best peer",
                None if ratio is None else ratio >= TARGET_RATIO,
                f"cogworker {ours or 0:,.0f} jobs/s, best peer {best} {peers.get(best or '', 0):,.0f}: "
                f"{ratio or 0:.2f}x",
            )
        )
        lag = drawn.value("cogworker", x, "lag_p99_ms")
        drawn.targets.append(
            Target(
                f"{x}: cogworker loop lag p99 <= {TARGET_LAG_P99_MS:g} ms",
                None if lag is None else lag <= TARGET_LAG_P99_MS,
                f"{lag or 0:.1f} ms",
            )
        )
    drawn.notes.append("Each point is the median of the system's runs, taken in rounds across the systems.")
    return drawn
