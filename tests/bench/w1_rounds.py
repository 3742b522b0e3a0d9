"""W1 in rounds: each round drains the backlog once with every system, in the same order.

On a shared 2-core machine the speed drifts by 15 % or more over minutes. Three drains of one system
followed by three of the next put that drift into the ratio between them; in rounds, a slow stretch
falls on every system alike. Each system's figures are still the median of its own runs.

A system's W1 variants (its worker processes pinned to CPUs) drain in the same rounds, each
right after the system's default drain.

A system that can't be loaded, or whose workers fail (NotRunnable), runs no further rounds; the
result says why, as the other steps' results do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import systems
from context import Context
from procs import NotRunnable
from systems.base import System
from throughput import drain_once, summarize, w1_job_count


def w1_rounds(
    ctx: Context, names: Iterable[str], has_w1: Callable[[System], bool], say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Per system: {"w1": summary}, or {"not_runnable": why}, or {"errors": {"w1": why}}; systems
    without W1 (`has_w1` false) are left out."""
    loaded: dict[str, System] = {}
    outcome: dict[str, dict[str, Any]] = {}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (system, variant or "") -> its drains
    try:
        for name in names:
            try:
                system = systems.load(name, ctx.redis.url)
            except Exception:  # measure() loads it again and reports why
                continue
            if has_w1(system):
                loaded[name] = system
                for variant in ["", *system.w1_variants()]:
                    runs[name, variant] = []
            else:
                system.close()
        for index in range(ctx.plan.w1_runs):
            for name, system in loaded.items():
                for variant, env in [("", {}), *system.w1_variants().items()]:
                    if name in outcome:
                        continue
                    label = f"{name} ({variant})" if variant else name
                    say(f"{label}: w1 run {index + 1} of {ctx.plan.w1_runs} ...")
                    began = time.monotonic()
                    try:
                        runs[name, variant].append(drain_once(ctx, system, w1_job_count(ctx, system), env))
                    except NotRunnable as exc:
                        outcome[name] = {"not_runnable": f"{name} not runnable: {exc}"}
                    except Exception as exc:
                        outcome[name] = {"errors": {"w1": f"{type(exc).__name__}: {exc}"}}
                    finally:
                        ctx.kill_all()  # a run that failed half-way may have left its workers up
                    say(f"{label}: w1 run took {time.monotonic() - began:.1f} s")
    finally:
        for system in loaded.values():
            system.close()
    for name, system in loaded.items():
        if name in outcome:
            continue
        jobs = w1_job_count(ctx, system)
        outcome[name] = {"w1": summarize(jobs, runs[name, ""])}
        variants = {v: summarize(jobs, runs[name, v]) for v in system.w1_variants()}
        if variants:
            outcome[name]["w1_variants"] = variants
    return outcome
