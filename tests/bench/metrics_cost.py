"""`metrics` in make bench (issue 37): what the per-class metrics in Redis cost a job.

W1's drain (cogworker's swarm of 2 x 8, no-op jobs that each do one INCR) with COGWORKER_METRICS on
and off, interleaved round by round (on first in odd rounds, off first in even ones) so that a
machine shared with other work slows both alike. Figures, median of the rounds: jobs/s, Redis
commands per job (INFO commandstats, the harness's own commands taken out; a flush's script and
the commands it runs count), the workers' CPU µs per job while the backlog lasts (a tenth to nine
tenths done: start-up and the tail left out), and the ratio on / off. The target (issue 37): at
most 0.05 more commands and about 3 µs more worker CPU per job.

W1 drains in about a second, well inside the default 5 s flush interval: with it, the measured
window would hold no flush at all. The "on" runs flush every FLUSH_S instead, five times as often as
the default, so each drain pays for its flushes and the figure is an upper bound on the default's.

A drain's worker CPU wanders by more than 3 µs from run to run on a shared machine, so the step
also times what metrics add to each job in-process, alone: the recorder's two calls (a pickup and
a run's end) on one thread, which is the whole of the per-job work (the flush is per process, every
few seconds).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import systems
from context import Context
from throughput import drain_once, w1_job_count

ROUNDS = 5
FIGURES = ("jobs_per_s", "commands_per_job", "script_calls_per_job", "backlog_workers_cpu_us_per_job")
RECORDER_CALLS = 200_000
# Commands only the flush script runs in W1 (nothing else in a W1 drain sends them), and commands it
# shares with the rest of cogworker, counted above the "off" runs' median.
FLUSH_ONLY = ("hincrby", "get", "hget", "lindex", "set")
FLUSH_SHARED = ("type", "expire", "hset")
FLUSH_S = "1"


def recorder_us_per_job(calls: int = RECORDER_CALLS) -> float:
    """CPU µs per job of the recorder's calls a job makes (its pickup, its end), on one thread."""
    from cogworker.worker.metrics.recorder import Recorder

    recorder = Recorder()
    names = [f"app.jobs.job{i % 20}" for i in range(calls)]
    now = time.time()
    began = time.process_time()
    for index, name in enumerate(names):
        recorder.picked("default", now - 0.25, now)
        recorder.ended(name, 0.0004 * (index % 50), index % 97 == 0, now)
    spent = time.process_time() - began
    recorder.take()
    return spent * 1e6 / calls


def flush_commands_per_job(on: dict[str, Any], off_runs: list[dict[str, Any]]) -> float:
    """The flush's own commands in one "on" drain, per job: a drain's total wanders by more than
    they add (how many fetches and acks a drain takes varies), so they are picked out by name. Each
    flush reads its record once (GET): that many EVALSHA calls are the flushes themselves."""
    calls = on["commands"]
    own = sum(calls.get(name, 0) for name in FLUSH_ONLY) + calls.get("get", 0)
    for name in FLUSH_SHARED:
        usual = statistics.median(run["commands"].get(name, 0) for run in off_runs)
        own += max(0.0, calls.get(name, 0) - usual)
    return float(own) / on["jobs"]


def metrics_cost(ctx: Context, say: Callable[[str], None]) -> dict[str, Any]:
    system = systems.load("cogworker", ctx.redis.url)
    rounds = 1 if ctx.plan.quick else ROUNDS
    try:
        jobs = w1_job_count(ctx, system)
        runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for index in range(rounds):
            order = ("on", "off") if index % 2 == 0 else ("off", "on")
            say(f"metrics: W1 round {index + 1} of {rounds}, metrics {order[0]} then {order[1]} ...")
            for kind in order:
                env = {"COGWORKER_METRICS": kind, "COGWORKER_METRICS_FLUSH_S": FLUSH_S}
                runs[kind].append(drain_once(ctx, system, jobs, env))
        result: dict[str, Any] = {"jobs": jobs, "rounds": rounds, "runs": runs}
        for kind, kind_runs in runs.items():
            result[kind] = {key: statistics.median(run[key] for run in kind_runs) for key in FIGURES}
        on, off = result["on"], result["off"]
        result["extra_commands_per_job"] = on["commands_per_job"] - off["commands_per_job"]
        result["flush_commands_per_job"] = statistics.median(
            flush_commands_per_job(run, runs["off"]) for run in runs["on"]
        )
        result["extra_workers_cpu_us_per_job"] = (
            on["backlog_workers_cpu_us_per_job"] - off["backlog_workers_cpu_us_per_job"]
        )
        result["workers_cpu_ratio"] = (
            on["backlog_workers_cpu_us_per_job"] / off["backlog_workers_cpu_us_per_job"]
        )
        result["throughput_ratio"] = on["jobs_per_s"] / off["jobs_per_s"]
        result["recorder_us_per_job"] = recorder_us_per_job()
        return result
    finally:
        system.close()


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'metrics: cogworker W1, 2 x 8':<32}{'jobs/s':>10}{'cmds/job':>10}{'script calls/job':>18}"
        f"{'workers µs/job':>16}",
        "-" * 86,
    ]
    for kind in ("off", "on"):
        row = result[kind]
        lines.append(
            f"{'COGWORKER_METRICS=' + kind:<32}{row['jobs_per_s']:>10,.0f}{row['commands_per_job']:>10.3f}"
            f"{row['script_calls_per_job']:>18.3f}{row['backlog_workers_cpu_us_per_job']:>16.1f}"
        )
    lines += [
        f"  the flushes' own commands (picked out by name): {result['flush_commands_per_job']:.4f}/job.",
        f"  on - off: {result['extra_commands_per_job']:+.4f} commands/job, "
        f"{result['extra_workers_cpu_us_per_job']:+.1f} workers µs/job (ratio of medians "
        f"{result['workers_cpu_ratio']:.3f}; throughput ratio {result['throughput_ratio']:.3f}).",
        "  the recorder alone (a pickup and a run's end, one thread): "
        f"{result['recorder_us_per_job']:.2f} µs/job.",
        f"  {result['jobs']:,} jobs per drain, {result['rounds']} rounds interleaved, median of the rounds; "
        f"workers' CPU while the backlog lasts; flushes every {FLUSH_S} s (the default is 5).",
    ]
    return "\n".join(lines)
