"""`make bench`: cogworker and its peers (Sidekiq and the Python job runners), measured back to back on
one private Redis.

Usage (through tests/bench/run.sh, which builds .bench-venv/):
    tests/bench/run.sh                  # the full run, every system and curve (about 1.5 hours on 2 cores)
    tests/bench/run.sh --quick          # a smoke run: small workloads, one W1 run
    tests/bench/run.sh --only cogworker,dramatiq
    tests/bench/run.sh --only web        # only the Web UI's page times (web_pages.py)
    tests/bench/run.sh --only limiter    # W1 plain and behind a concurrent limiter (limiter_overhead.py)
    tests/bench/run.sh --only empty      # W1 with no job body: cogworker and Sidekiq (framework_cost.py)
    tests/bench/run.sh --only profile    # W1's futex calls and switches per job (gil_profile.py; needs perf)
    tests/bench/run.sh --only metrics    # W1 with per-class metrics on and off (metrics_cost.py)
    tests/bench/run.sh --only cogworker,dramatiq,arq,saq --steps w4   # W4 (async jobs) alone
    tests/bench/run.sh --only curves     # every curve (curves/): how cost grows with the work
    tests/bench/run.sh --only backlog --docs-images   # one curve, its PNGs also into docs/images/bench/

W1 runs first, in rounds across the systems (w1_rounds.py), then W4 in rounds (w4.py); then each
system runs its other steps.
arq and SAQ run W4 only (they have no sync jobs); rq and celery have no async jobs, so no W4.

Prints one table (each figure per system and cogworker / peer), then the Web UI's page times
(web_pages.py), and writes every raw figure to bench-results/bench-<timestamp>.json at the
repository root. Worker logs go beside it. A Web UI page that answers an error makes the run exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import curves
import systems
from context import Context, Plan
from curve import Curve, text_tables
from footprint import idle_cost
from framework_cost import framework_cost
from framework_cost import table as empty_table
from gil_profile import gil_profile
from gil_profile import table as profile_table
from latency import pickup_latency
from limiter_overhead import limiter_overhead
from limiter_overhead import table as limiter_table
from metrics_cost import metrics_cost
from metrics_cost import table as metrics_table
from plot import draw
from procs import RUN_ID_VAR, NotRunnable, memory, sweep, wait_for
from recovery import recovery
from redis_server import RedisServer
from report import footnotes, table, web_table, write_json
from restart import rolling_restart
from scaling import scaling
from scaling import table as scaling_table
from systems.base import MANY_PROCESSES, System
from throughput import enqueue_rates
from w1_rounds import w1_rounds
from w4 import curve as w4_curve
from w4 import w4_rounds
from web_pages import run as web_pages

WEB = "web"  # not a system: the Web UI's page times, after the systems
SCALING = "scaling"  # not a system: cogworker with 1, 2, 4 and 8 processes against one Redis
LIMITER = "limiter"  # not a system: cogworker's W1 plain and behind a concurrent limiter
EMPTY = "empty"  # not a system: W1 with no job body, cogworker and Sidekiq (the runners' own cost)
PROFILE = "profile"  # not a system, nor in the default run: it needs Linux's perf (gil_profile.py)
METRICS = "metrics"  # not a system: cogworker's W1 with per-class metrics on and off
CURVES = "curves"  # every curve module (curves/), each also its own --only name

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "bench-results"
DOCS_IMAGES = ROOT / "docs" / "images" / "bench"
Step = Callable[[Context, System], dict[str, Any]]


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def step_enqueue(ctx: Context, system: System) -> dict[str, Any]:
    return {"enqueue": enqueue_rates(ctx, system)}


def step_idle(ctx: Context, system: System) -> dict[str, Any]:
    """W2 and the idle window share one set of workers: both want them idle and warm."""
    group = ctx.start(system, "w2-idle")
    try:
        ctx.wait_ready(system, group)
        time.sleep(ctx.plan.settle_s)
        w2 = pickup_latency(ctx, system, group)
        time.sleep(ctx.plan.settle_s)
        return {"w2": w2, "idle": idle_cost(ctx, group)}
    finally:
        ctx.stop(group)


def step_memory(ctx: Context, system: System) -> dict[str, Any]:
    """Memory after the same few hundred jobs, in each mode the system has (cogworker: preload too)."""
    figures: dict[str, Any] = {}
    for mode, env in {"default": {}, **system.memory_variants()}.items():
        ctx.redis.flush()
        group = ctx.start(system, f"memory-{mode}", env)
        try:
            ctx.wait_ready(system, group)
            system.push_noop_bulk(ctx.plan.w2_jobs)
            wait_for(lambda: ctx.done() >= ctx.plan.w2_jobs, 60, "the memory step's jobs", group)
            time.sleep(1)  # let the last job's buffers settle before reading the pages
            figures[mode] = memory(group).as_dict()
        finally:
            ctx.stop(group)
    many = system.many_processes(MANY_PROCESSES)
    if many is not None:
        argv, many_env = many
        for mode, env in {"default": {}, **system.memory_variants()}.items():
            figures[f"{mode}-{MANY_PROCESSES}"] = _memory_of(ctx, system, mode, {**many_env, **env}, argv)
    return {"memory": figures}


def _memory_of(
    ctx: Context, system: System, mode: str, env: dict[str, str], argv: list[str]
) -> dict[str, Any]:
    """Memory with MANY_PROCESSES workers, once each has run jobs (a hundred per process)."""
    ctx.redis.flush()
    group = ctx.start(system, f"memory-{mode}-{MANY_PROCESSES}", env, argv)
    try:
        jobs = 100 * MANY_PROCESSES
        system.push_noop_bulk(jobs)
        wait_for(lambda: ctx.done() >= jobs, 120, f"{jobs} jobs on {MANY_PROCESSES} processes", group)
        wait_for(lambda: len(group.children()) >= MANY_PROCESSES, 60, "every worker process", group)
        time.sleep(1)  # as above
        return memory(group).as_dict()
    finally:
        ctx.stop(group)


def step_recovery(ctx: Context, system: System) -> dict[str, Any]:
    return {"w3": recovery(ctx, system)}


def step_restart(ctx: Context, system: System) -> dict[str, Any]:
    return {"restart": rolling_restart(ctx, system)}


# W1 and W4 are not among them: each runs in rounds across the systems (w1_rounds.py, w4.py).
W1 = "w1"
W4 = "w4"
STEPS: list[tuple[str, Step, bool]] = [  # (name, step, needs running workers)
    ("enqueue", step_enqueue, False),
    ("w2+idle", step_idle, True),
    ("memory", step_memory, True),
    ("w3", step_recovery, True),
    ("restart", step_restart, True),
]
STEP_NAMES = [STEPS[0][0], W1, *(name for name, _, _ in STEPS[1:]), W4]


def system_steps(system: System) -> tuple[str, ...]:
    """The steps `system` can run: its own list, and W4 where it runs async jobs."""
    return (
        *system.steps,
        *(("w4",) if system.w4_argv() is not None else ()),
        *(("restart",) if system.rolling_restart_signal is not None else ()),
    )


def measure(ctx: Context, name: str, steps: list[str], rounds: dict[str, Any]) -> dict[str, Any]:
    """The system's steps, with `rounds` (what w1_rounds and w4_rounds found for it, maybe nothing)
    taken in."""
    w1 = rounds
    result: dict[str, Any] = {"name": name, "errors": dict(w1.get("errors", {}))}
    try:
        system = systems.load(name, ctx.redis.url)
    except Exception as exc:
        result["not_runnable"] = f"{name} not runnable: its client does not load: {type(exc).__name__}: {exc}"
        return result
    result["version"] = system.version()
    result["notes"] = list(system.notes)
    result.update({key: value for key, value in w1.items() if key != "errors"})
    try:
        own = system_steps(system)
        for step_name, step, needs_workers in STEPS:
            if step_name not in steps or step_name not in own:
                continue
            if needs_workers and result.get("not_runnable"):
                continue
            began = time.monotonic()
            say(f"{name}: {step_name} ...")
            try:
                result.update(step(ctx, system))
            except NotRunnable as exc:
                result["not_runnable"] = f"{name} not runnable: {exc}"
            except Exception as exc:
                result["errors"][step_name] = f"{type(exc).__name__}: {exc}"
            finally:
                ctx.kill_all()  # a step that failed half-way may have left its workers up
            say(f"{name}: {step_name} took {time.monotonic() - began:.1f} s")
    finally:
        system.close()
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small workloads, one W1 run")
    parser.add_argument(
        "--one-session",
        action="store_true",
        help="start Redis and every worker command in this session, not each in its own (procs.placement)",
    )
    names = [*systems.NAMES, WEB, SCALING, LIMITER, EMPTY, METRICS, CURVES, *curves.names()]
    parser.add_argument(
        "--only", default=",".join(names), help=f"comma-separated, from {','.join([*names, PROFILE])}"
    )
    parser.add_argument(
        "--steps",
        default=",".join(STEP_NAMES),
        help=f"comma-separated, from {','.join(STEP_NAMES)} (each system runs those it has)",
    )
    parser.add_argument(
        "--docs-images",
        action="store_true",
        help=f"also write each curve's PNGs to {DOCS_IMAGES.relative_to(ROOT)}/ (the docs' benchmarks page)",
    )
    args = parser.parse_args(argv)
    args.steps = [n.strip() for n in args.steps.split(",") if n.strip()]
    if not args.steps or [n for n in args.steps if n not in STEP_NAMES]:
        parser.error(f"--steps takes names from {', '.join(STEP_NAMES)} (got {args.steps})")
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in args.only if n not in [*names, PROFILE]]
    if unknown or not args.only:
        parser.error(f"--only takes names from {', '.join(names)} (got {args.only})")
    args.web = WEB in args.only
    args.scaling = SCALING in args.only
    args.limiter = LIMITER in args.only
    args.empty = EMPTY in args.only
    args.profile = PROFILE in args.only
    args.metrics = METRICS in args.only
    args.curves = curves.names() if CURVES in args.only else [n for n in curves.names() if n in args.only]
    # Run in the canonical order, so cogworker comes first and the table reads the same every time.
    args.only = [n for n in systems.NAMES if n in args.only]
    return args


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    plan = Plan.make(args.quick, args.one_session)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_id = uuid.uuid4().hex
    log_dir = RESULTS_DIR / f"bench-{stamp}-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the finally below ends every process this run started.
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
    server = RedisServer({**os.environ, RUN_ID_VAR: run_id}, plan.one_session)
    ctx = Context(server, plan, run_id, log_dir)
    began = time.monotonic()
    results: dict[str, Any] = {}
    web: dict[str, Any] | None = None
    scaled: dict[str, Any] | None = None
    limited: dict[str, Any] | None = None
    empty: dict[str, Any] | None = None
    metered: dict[str, Any] | None = None
    profiled: dict[str, Any] | None = None
    drawn: dict[str, list[Curve]] = {}
    try:
        server.start()
        # The job modules imported here, to push, read the bench Redis from the environment too.
        os.environ["BENCH_REDIS_URL"] = server.url
        say(f"redis-server {server.version()} on {server.url}; worker logs in {log_dir}")
        drained: dict[str, dict[str, Any]] = {}
        if W1 in args.steps:
            drained = w1_rounds(ctx, args.only, lambda system: W1 in system_steps(system), say)
        if W4 in args.steps:
            async_runs = w4_rounds(ctx, args.only, say)
            measured = {name: found for name, found in async_runs.items() if found.get("w4")}
            if measured:
                drawn["w4"] = [w4_curve(measured)]
            for name, found in async_runs.items():
                merged = drained.setdefault(name, {})
                errors = {**merged.get("errors", {}), **found.pop("errors", {})}
                merged.update(found)
                if errors:
                    merged["errors"] = errors
        for name in args.only:
            results[name] = measure(ctx, name, args.steps, drained.get(name, {}))
        if args.scaling:
            scaled = scaling(ctx, say)
        if args.limiter:
            limited = limiter_overhead(ctx, say)
        if args.empty:
            empty = framework_cost(ctx, say)
        if args.metrics:
            metered = metrics_cost(ctx, say)
        if args.profile:
            profiled = gil_profile(ctx, say)
        for name in args.curves:
            say(f"curve {name} ...")
            began_curve = time.monotonic()
            try:
                drawn[name] = curves.load(name).run(ctx, say)
            except Exception as exc:  # one curve that fails must not cost the others' figures
                say(f"curve {name} failed: {type(exc).__name__}: {exc}")
                drawn[name] = []
            finally:
                ctx.kill_all()
                server.flush()
            say(f"curve {name} took {time.monotonic() - began_curve:.1f} s")
        if args.web:
            say("web: the Web UI's pages ...")
            web = web_pages(server.client, server.url, plan.quick, say)
        redis_version = server.version()
    finally:
        ctx.kill_all()
        server.stop()
        leftovers = sweep(run_id)
        if leftovers:
            say(f"killed {len(leftovers)} leftover processes: {leftovers}")
    elapsed = time.monotonic() - began
    plan_dict = dataclasses.asdict(plan)
    if results:
        print(table(results))
        print()
        for note in footnotes(results, plan_dict):
            print(f"  {note}")
    if scaled is not None:
        print(("\n" if results else "") + scaling_table(scaled))
    if limited is not None:
        print(("\n" if results or scaled else "") + limiter_table(limited))
    if empty is not None:
        print(("\n" if results or scaled or limited else "") + empty_table(empty))
    if metered is not None:
        print(("\n" if results or scaled or limited or empty else "") + metrics_table(metered))
    if profiled is not None:
        print(("\n" if results or scaled or limited or empty or metered else "") + profile_table(profiled))
    for curve in (c for found in drawn.values() for c in found):
        print("\n" + text_tables(curve))
    if web is not None:
        print(("\n" if results or scaled or limited or empty or metered or profiled else "") + web_table(web))
    document = {
        "started": stamp,
        "elapsed_s": elapsed,
        "plan": plan_dict,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "redis": redis_version},
        "versions": {name: r.get("version") for name, r in results.items()},
        "results": results,
        "web": web,
        "scaling": scaled,
        "limiter": limited,
        "empty": empty,
        "metrics": metered,
        "profile": profiled,
        "curves": {name: [c.as_dict() for c in found] for name, found in drawn.items()},
    }
    path = write_json(RESULTS_DIR, stamp, document)
    for curve in (c for found in drawn.values() for c in found):
        for png in draw(curve, RESULTS_DIR, f"bench-{stamp}"):
            if args.docs_images:
                DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
                (DOCS_IMAGES / png.name.removeprefix(f"bench-{stamp}-")).write_bytes(png.read_bytes())
    print(f"\n  raw figures: {path.relative_to(ROOT)}; took {elapsed / 60:.1f} min")
    # A page that answered an error is a broken UI, not a slow one: the run fails.
    return 1 if web is not None and web["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
