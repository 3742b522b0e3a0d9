"""Start-up: from launch to the first job done, for each system's worker command, measured from outside.

Each launch starts with the job(s) already queued in a flushed Redis; the time is from the moment the
harness starts the command (just before its fork) to the moment the first job ran its body, which
records the wall clock itself (jobkit.mark_done's bench:t:first; every process is on this machine).
So it holds everything a user's `systemctl restart` waits for: the interpreter, the imports, the
settings, the fork server and the fork, the app's import, the connections, and the first fetch.

The commands, each as a user starts it, from the pip-installed (not editable) package in .bench-venv:
`cogworker-swarm` (2 workers x 8 threads), `cogworker run` (one process, 8 threads), `dramatiq
jobs_startup_dramatiq --processes 2 --threads 8`, and one `sidekiq -c 8` process (Sidekiq 6 forks no
workers: its own command, with no multiproc.py in front), with and without YJIT.

x is the app and the work waiting:
- "one-job app": a job module holding W1's no-op job alone (jobs_startup_<system>), one job queued;
- "20,000 queued": the same app, 20,000 jobs queued (W1's backlog, the case `make bench` times);
- "typical stack": the one-job app importing a typical service's modules first (startup_stack.py:
  pydantic, httpx2, jinja2, dateutil, sqlite3, ...), the same in each Python system's app. Sidekiq is
  left out there: a Ruby app loads other libraries, so no figure would compare.

Systems run interleaved, one launch each per round (the order turning round by round), and each figure
is the median of its rounds, since this machine's speed drifts by a quarter within minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import jobkit
import systems
from context import Context
from curve import Curve, Metric, Target
from procs import WorkerGroup, cpu_seconds, wait_for
from systems.base import System
from systems.sidekiq_system import BENCH_DIR, Sidekiq

TITLE = "start-up: launch to first job done, cogworker-swarm and cogworker run against the peers"

ONE_JOB = "one-job app"
QUEUED = "20,000 queued"
STACK = "typical stack"
QUEUED_JOBS = 20_000
ROUNDS = 7
QUICK_ROUNDS = 1
# Long enough for a slow Ruby start on a loaded machine; a launch that takes longer is a failure.
FIRST_JOB_TIMEOUT_S = 60.0

SWARM = "cogworker-swarm"
RUN = "cogworker (cogworker run)"
DRAMATIQ = "Dramatiq"
SIDEKIQ_YJIT = "Sidekiq + YJIT"
SIDEKIQ = "Sidekiq"


@dataclass(frozen=True)
class Launch:
    """One system's worker command, the client that pushes its jobs, and the apps it can start."""

    series: str
    system: System
    argv: list[str]
    env: dict[str, str]
    stack: bool  # runs the "typical stack" app (a Python system)


def launches(ctx: Context, say: Callable[[str], None]) -> list[Launch]:
    found: list[Launch] = []
    cogworker = systems.load("cogworker", ctx.redis.url)
    app = {"COGWORKER_REQUIRE": "jobs_startup_cogworker"}
    found.append(Launch(SWARM, cogworker, cogworker.worker_argv(), app, True))
    # One process: no COGWORKER_COUNT, which only a swarm reads.
    found.append(Launch(RUN, cogworker, ["cogworker", "run"], app, True))
    dramatiq = systems.load("dramatiq", ctx.redis.url)
    argv = dramatiq.worker_argv()
    argv[argv.index("jobs_dramatiq")] = "jobs_startup_dramatiq"
    found.append(Launch(DRAMATIQ, dramatiq, argv, {}, True))
    for name, series in (("sidekiq-yjit", SIDEKIQ_YJIT), ("sidekiq", SIDEKIQ)):
        try:
            sidekiq = systems.load(name, ctx.redis.url)
        except Exception as exc:  # no Ruby or no Sidekiq here: the other columns still run
            say(f"startup: {series} left out: {exc}")
            continue
        assert isinstance(sidekiq, Sidekiq)
        jobs = BENCH_DIR / "jobs_startup_sidekiq.rb"
        found.append(Launch(series, sidekiq, sidekiq.one_process_argv(jobs), {}, False))
    return found


def launch_once(ctx: Context, launch: Launch, scenario: str) -> dict[str, float]:
    """Push the scenario's jobs, start the command, and time it to the first job's body."""
    ctx.redis.flush()
    if scenario == QUEUED:
        launch.system.push_noop_bulk(QUEUED_JOBS)
    else:
        launch.system.push_noop()
    extra = {**launch.env, **({"BENCH_STACK": "1"} if scenario == STACK else {})}
    label = f"startup-{scenario.replace(' ', '-').replace(',', '')}"
    group = ctx.start(launch.system, label, extra, argv=launch.argv)
    try:
        wait_for(
            lambda: ctx.client.exists(jobkit.T_FIRST) > 0, FIRST_JOB_TIMEOUT_S, "the first job", group, 0.005
        )
        seen_at = time.time()
        cpu_s = _cpu_so_far(group)
        first_at = float(ctx.client.get(jobkit.T_FIRST) or 0)
    finally:
        ctx.stop(group)
    return {
        "startup_s": first_at - group.started_at,
        "seen_s": seen_at - group.started_at,
        "cpu_ms": cpu_s * 1000.0,
    }


def _cpu_so_far(group: WorkerGroup) -> float:
    """CPU the command's processes have used so far, those still alive (a helper that has exited,
    such as cogworker's settings check, is counted in its reaped parent's children's times)."""
    assert group.parent is not None
    procs = group.subtree(group.parent)
    total = cpu_seconds(procs)
    for proc in procs:
        try:
            times = proc.cpu_times()
        except Exception:
            continue
        total += times.children_user + times.children_system
    return total


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    rounds = QUICK_ROUNDS if ctx.plan.quick else ROUNDS
    curve = Curve(
        name="startup",
        title="Start-up",
        x_label="app and queue at launch",
        metrics=[
            Metric("startup_s", "launch to first job done", "s", "↓"),
            Metric("cpu_ms", "CPU of the command's processes by then", "ms", "↓"),
        ],
    )
    chosen = launches(ctx, say)
    scenarios = [ONE_JOB, QUEUED, STACK]
    try:
        for index in range(rounds):
            # The order turns each round, so no system always follows the same one.
            shift = index % len(chosen)
            order = chosen[shift:] + chosen[:shift]
            for scenario in scenarios:
                for launch in order:
                    if scenario == STACK and not launch.stack:
                        continue
                    figures = launch_once(ctx, launch, scenario)
                    curve.add(launch.series, scenario, **figures)
                    say(
                        f"startup round {index + 1}/{rounds} {scenario}, {launch.series}: "
                        f"{figures['startup_s']:.3f} s"
                    )
    finally:
        ctx.kill_all()
        for system in {id(launch.system): launch.system for launch in chosen}.values():
            system.close()
    curve.targets = [_target(curve, series) for series in (SWARM, RUN)]
    curve.notes = [
        f"Medians of {rounds} launch(es) per point, systems interleaved round by round. Launch: the "
        "harness's clock just before it starts the command; done: the first job's own clock as its "
        "body runs. Each from the pip-installed package; bytecode compiled (as pip leaves it).",
        "cogworker-swarm: COGWORKER_COUNT=2, CONCURRENCY=8; cogworker run: one process, CONCURRENCY=8; "
        "Dramatiq: --processes 2 --threads 8; Sidekiq: one `sidekiq -c 8` process, its own command.",
        "Sidekiq runs no 'typical stack' app: a Ruby app loads other libraries than a Python one.",
    ]
    return [curve]


def _target(curve: Curve, series: str) -> Target:
    """Each cogworker command no slower than Dramatiq, in every scenario of this run."""
    judged: list[str] = []
    met: bool | None = True
    for scenario in curve.xs():
        ours = curve.value(series, scenario, "startup_s")
        theirs = curve.value(DRAMATIQ, scenario, "startup_s")
        if ours is None or theirs is None:
            met = None
            continue
        judged.append(f"{scenario}: {ours:.3f} s vs {theirs:.3f} s ({ours / theirs:.2f}x)")
        if ours > theirs and met is not None:
            met = False
    return Target(f"{series} start-up no slower than Dramatiq's", met, "; ".join(judged))
