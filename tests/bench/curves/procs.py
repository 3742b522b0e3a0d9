"""Processes and threads: throughput and per-job cost as processes x threads grow, for a no-op job and a
job that waits 10 ms on I/O (jobkit.io_wait: a blocking socket wait, the GIL released).

Grid: processes 1, 2, 4, 8 x threads 1, 8, 32 with W1's no-op body; the same processes x threads 1, 8,
32, 100 with the I/O-bound body, whose ceiling is processes x threads x 100 jobs/s until the CPU
runs out. cogworker: COGWORKER_COUNT x COGWORKER_CONCURRENCY, its defaults otherwise (CPU affinity
auto: pinned only at COUNT 2 on 2 CPUs). Sidekiq + YJIT: N `sidekiq -c T` processes under
multiproc.py. Dramatiq: `--processes N --threads T`.

84 points (28 per system) are too many for full drains, so each point is a fixed time window under a
backlog: push a backlog sized for the point (BACKLOG_S of the system's expected rate), start the
workers, wait for the first job and every process, WARMUP_S more, then count jobs done, CPU and Redis
commands over WINDOW_S (or until the backlog runs low, whichever comes first), and SIGKILL the workers
(their stop is not measured, and costs Dramatiq seconds). Each point runs the three systems back to
back, their order turning from point to point, so the machine's drift falls on all alike. One round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import systems
from context import Context
from curve import Curve, Metric, Target
from procs import NotRunnable, memory, wait_for
from redis_server import delta
from systems.base import System
from throughput import CpuSample

TITLE = "processes x threads: throughput and per-job cost, no-op and 10 ms I/O jobs"

SERIES = {"cogworker": "cogworker", "sidekiq-yjit": "Sidekiq + YJIT", "dramatiq": "Dramatiq"}
PROCESSES = (1, 2, 4, 8)
THREADS = {"noop": (1, 8, 32), "io": (1, 8, 32, 100)}
QUICK = {"noop": ((1, 1), (2, 8), (8, 32)), "io": ((1, 1), (1, 8), (2, 100))}
WARMUP_S = 0.5
WINDOW_S = 2.0
QUICK_WINDOW_S = 1.0
POLL_S = 0.05
# Jobs/s a system can't pass on this machine whatever its size (above its best W1), and per job thread
# for each body: the backlog is sized from them so it lasts the window, never much longer.
CEILING = {"cogworker": 16_000, "sidekiq-yjit": 14_000, "dramatiq": 6_000}
PER_THREAD = {"noop": 8_000, "io": 100}
BACKLOG_S = 4.0  # start-up after the first job, the warm-up and the window, with room to spare
MIN_WINDOW_S = 0.5  # a window the backlog cut shorter than this is no figure

METRICS = [
    Metric("jobs_per_s", "throughput", "jobs/s", "↑"),
    Metric("worker_cpu_us_per_job", "worker CPU per job", "µs", "↓"),
    Metric("redis_cpu_us_per_job", "Redis CPU per job", "µs", "↓"),
    Metric("commands_per_job", "Redis commands per job", "", "↓"),
    Metric("worker_pss_mb", "worker memory (PSS, all processes)", "MB", "↓"),
]


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    noop = Curve(
        "procs",
        "Processes x threads, no-op jobs",
        "processes x threads",
        METRICS,
    )
    io = Curve(
        "procs-io",
        "Processes x threads, jobs waiting 10 ms on I/O",
        "processes x threads",
        [Metric("jobs_per_s", "throughput", "jobs/s", "↑", log=True), *METRICS[1:]],
    )
    loaded = load_systems(ctx, [noop, io])
    broken: set[str] = set()
    try:
        turn = 0
        for body, curve in (("noop", noop), ("io", io)):
            for processes, threads in _grid(ctx, body):
                x = f"{processes}x{threads}"
                order = list(loaded)[turn % len(loaded) :] + list(loaded)[: turn % len(loaded)]
                turn += 1
                for name in order:
                    if name in broken:
                        continue
                    say(f"procs: {SERIES[name]} {body} {x} ...")
                    try:
                        figures = point(ctx, loaded[name], body, processes, threads)
                    except NotRunnable as exc:
                        broken.add(name)
                        curve.notes.append(f"{SERIES[name]}: not runnable: {exc}")
                        continue
                    except Exception as exc:
                        curve.notes.append(f"{SERIES[name]} {x}: failed: {type(exc).__name__}: {exc}")
                        continue
                    finally:
                        ctx.kill_all()
                    curve.add(SERIES[name], x, **figures)
    finally:
        for system in loaded.values():
            system.close()
    window = QUICK_WINDOW_S if ctx.plan.quick else WINDOW_S
    for curve in (noop, io):
        curve.notes.append(
            f"Each point: a {window:.0f} s window under a backlog, after the first job, every process and "
            f"{WARMUP_S} s more; one round, the systems back to back at each point. Worker CPU: the "
            "worker processes' own (a cogworker supervisor or multiproc.py parent apart). Commands per "
            "job leave out the jobs' INCR and the harness's GETs. Redis memory is not drawn: here it is "
            "the backlog's, which the backlog curve measures."
        )
        curve.notes.append("2 CPUs: past 2 processes every point shares them with Redis and the others.")
    io.notes.append(
        "The I/O body waits in select() on a socket nobody writes to (jobkit.io_wait), then does W1's INCR; "
        "its ceiling is processes x threads x 100 jobs/s."
    )
    noop.targets.extend(_noop_targets(noop))
    io.targets.extend(_io_targets(io))
    return [noop, io]


def load_systems(ctx: Context, curves: list[Curve]) -> dict[str, System]:
    """The systems of SERIES that load; a note on each curve for one that doesn't."""
    loaded: dict[str, System] = {}
    for name in SERIES:
        try:
            loaded[name] = systems.load(name, ctx.redis.url)
        except Exception as exc:
            for curve in curves:
                curve.notes.append(f"{SERIES[name]}: not runnable: {type(exc).__name__}: {exc}")
    return loaded


def _grid(ctx: Context, body: str) -> list[tuple[int, int]]:
    if ctx.plan.quick:
        return list(QUICK[body])
    return [(p, t) for p in PROCESSES for t in THREADS[body]]


def point(ctx: Context, system: System, body: str, processes: int, threads: int) -> dict[str, float | None]:
    """One system at one size: the window's figures."""
    sized = system.sized(processes, threads)
    assert sized is not None
    argv, env = sized
    ctx.redis.flush()
    expected = min(CEILING[system.name], PER_THREAD[body] * processes * threads)
    jobs = math.ceil(expected * BACKLOG_S)
    (system.push_noop_bulk if body == "noop" else system.push_io_bulk)(jobs)
    group = ctx.start(system, f"procs-{body}-{processes}x{threads}", env, argv)
    polls = 0

    def done() -> int:
        nonlocal polls
        polls += 1
        return ctx.done()

    wait_for(
        lambda: done() >= 1 and len(group.children()) >= processes,
        ctx.plan.ready_timeout_s,
        f"a first job and {processes} worker processes",
        group,
    )
    time.sleep(WARMUP_S)
    # Stop early while every thread still has jobs waiting: a job held in memory, one running per thread.
    low_water = jobs - 3 * processes * threads
    window = QUICK_WINDOW_S if ctx.plan.quick else WINDOW_S
    polls_before = polls
    commands_before = ctx.redis.commandstats()
    start, done_start = CpuSample.take(ctx, group), done()
    deadline = start.at + window
    done_end = done_start
    while time.monotonic() < deadline and done_end < low_water:
        time.sleep(POLL_S)
        done_end = done()
    end = CpuSample.take(ctx, group)
    done_end = done()
    commands = delta(commands_before, ctx.redis.commandstats())
    pss = memory(group).as_dict()["total_pss_mb"]
    ran = done_end - done_start
    if end.at - start.at < MIN_WINDOW_S or ran <= 0:
        raise RuntimeError(f"the backlog ({jobs:,} jobs) ran out {end.at - start.at:.2f} s into the window")
    # The jobs' own INCRs and the harness's GETs of the counter are not the system's commands.
    commands[system.done_command] = commands.get(system.done_command, 0) - ran
    commands["get"] = commands.get("get", 0) - (polls - polls_before)
    own = sum(max(0, n) for n in commands.values())
    return {
        "jobs_per_s": ran / (end.at - start.at),
        "worker_cpu_us_per_job": (end.workers - start.workers) * 1e6 / ran,
        "redis_cpu_us_per_job": (end.redis - start.redis) * 1e6 / ran,
        "commands_per_job": own / ran,
        "worker_pss_mb": float(pss),  # type: ignore[arg-type]
    }


def _noop_targets(curve: Curve) -> list[Target]:
    """The issue names none here; what "bends" means for a no-op drain on 2 CPUs: more processes or
    threads than the CPUs need must not cost much of the best figure."""
    rates = {x: curve.value("cogworker", x, "jobs_per_s") for x in curve.xs()}
    found = {x: r for x, r in rates.items() if r is not None}
    if not found:
        return [Target("cogworker no-op: 8 processes keep ≥ 80 % of the best throughput", None, "no points")]
    best_x = max(found, key=lambda x: found[x])
    many = {x: r for x, r in found.items() if str(x).startswith("8x")}
    if not many:
        return [
            Target("cogworker no-op: 8 processes keep ≥ 80 % of the best throughput", None, "no 8x point")
        ]
    worst_x = min(many, key=lambda x: many[x])
    share = many[worst_x] / found[best_x]
    detail = (
        f"8 processes at worst {worst_x}: {many[worst_x]:,.0f} jobs/s, "
        f"{share:.0%} of {best_x}'s {found[best_x]:,.0f}"
    )
    return [Target("cogworker no-op: 8 processes keep ≥ 80 % of the best throughput", share >= 0.8, detail)]


def _io_targets(curve: Curve) -> list[Target]:
    """Jobs that wait need threads, not CPU: one process's threads should scale the rate with them."""
    one, eight = (curve.value("cogworker", x, "jobs_per_s") for x in ("1x1", "1x8"))
    text = "cogworker I/O-bound: 8 threads of one process run ≥ 7 times the jobs of one thread"
    if one is None or eight is None:
        return [Target(text, None, "1x1 or 1x8 missing")]
    return [
        Target(text, eight >= 7 * one, f"1x1 {one:,.0f} jobs/s, 1x8 {eight:,.0f} jobs/s ({eight / one:.1f}x)")
    ]
