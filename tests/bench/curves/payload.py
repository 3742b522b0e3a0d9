"""Payload size: throughput and memory with 100 B, 10 KB and 1 MB arguments, and cogworker's copies.

Each system drains jobs with one string argument of the size (ASCII text), pushed through its own bulk
path; the drain is measured from a tenth of the jobs done to nine tenths (_drain.py). Memory: the
worker command's processes at both edges of that window (the larger figure; workers' USS, the parent's
RSS) and Redis's used_memory with the jobs queued.

The heap profile (cogworker): a worker with one process and one thread runs PROFILE_JOBS jobs of the
largest size with copyprobe.py counting, per C function, the allocations of at least nine tenths of
the payload's size; the push side is counted the same way in this process, around push_bulk.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import copyprobe
import orjson
import systems
from context import Context
from curve import Curve, Metric, Target
from procs import wait_for

from curves._drain import SERIES, drain_window, used_memory

TITLE = "Payload size: throughput and memory with 100 B, 10 KB and 1 MB arguments; cogworker's copies"
ROUNDS = 3
# (argument bytes, jobs) per point: the 1 MB point queues 300 MB in Redis.
FULL = ((100, 20_000), (10_000, 20_000), (1_000_000, 300))
QUICK = ((100, 5_000), (10_000, 5_000), (1_000_000, 100))
PROFILE_JOBS = 20
PEAK = " (peak x)"  # copyprobe's name suffix for a call's transient working memory


def _data(size: int) -> str:
    return ("payload " * (size // 8 + 1))[:size]


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    points = QUICK if ctx.plan.quick else FULL
    rounds = 1 if ctx.plan.quick else ROUNDS
    curve = Curve(
        "payload",
        "Payload size: throughput and memory by argument size",
        "argument size (bytes)",
        [
            Metric("jobs_per_s", "drain rate", "jobs/s", "↑", log=True),
            Metric("worker_cpu_us", "worker CPU per job", "µs", "↓", log=True),
            Metric("redis_cpu_us", "Redis CPU per job", "µs", "↓", log=True),
            Metric("commands", "Redis commands per job", "", "↓"),
            Metric("worker_mb", "worker memory (USS of each worker + parent RSS)", "MB", "↓"),
            Metric("redis_mb", "Redis memory, jobs queued", "MB", "↓", log=True),
        ],
        x_log=True,
    )
    loaded = {name: systems.load(name, ctx.redis.url) for name in SERIES}
    try:
        for index in range(rounds):
            for size, jobs in points:
                data = _data(size)
                for name, system in loaded.items():
                    began = time.monotonic()
                    ctx.redis.flush()
                    before = used_memory(ctx)
                    system.push_payload_bulk(jobs, data)  # type: ignore[attr-defined]
                    queued = used_memory(ctx)
                    label, edges = f"payload-{size}", (jobs // 10, jobs * 9 // 10)
                    found = drain_window(ctx, system, label, jobs, *edges, 600.0, take_memory=True)
                    curve.add(
                        SERIES[name],
                        size,
                        worker_mb=max(_worker_mb(m) for m in found["memory"]),
                        redis_mb=(queued - before) / 2**20,
                        **{k: found[k] for k in ("jobs_per_s", "worker_cpu_us", "redis_cpu_us", "commands")},
                    )
                    say(
                        f"payload round {index + 1}/{rounds}, {size:,} B, {SERIES[name]}: "
                        f"{found['jobs_per_s']:,.0f} jobs/s ({time.monotonic() - began:.0f} s)"
                    )
                    ctx.redis.flush()
        profile = copies(ctx, loaded["cogworker"], points[-1][0], say)
    finally:
        for system in loaded.values():
            system.close()
        ctx.redis.flush()
    curve.notes.append(
        "Jobs per point: " + ", ".join(f"{jobs:,} of {size:,} B" for size, jobs in points) + "; each "
        "system pushes them through its own bulk path (cogworker push_bulk, Sidekiq one pipeline of "
        "LPUSHes, dramatiq group().run()). Worker memory: the larger of the two window edges."
    )
    curve.notes.extend(profile["notes"])
    curve.targets.append(profile["target"])
    return [curve]


def _worker_mb(figures: dict[str, Any]) -> float:
    parent = float(figures["parent_rss_mb"]) + float(figures["helpers_rss_mb"])
    return parent + sum(figures["children_uss_mb"])


def copies(ctx: Context, system: Any, size: int, say: Callable[[str], None]) -> dict[str, Any]:
    """cogworker's payload-sized copies per job, pushing (in this process) and running (in a worker)."""
    data = _data(size)
    ctx.redis.flush()
    system.push_payload_bulk(1, "warm-up")  # the push script loaded: EVALSHA from now on
    copyprobe.install(size)
    pushed = copyprobe.counting(lambda: system.push_payload_bulk(PROFILE_JOBS, data))
    ctx.reset_bench_keys()
    env = {
        "BENCH_COPY_PROBE": str(size),
        "BENCH_TARGET": str(PROFILE_JOBS),
        "COGWORKER_COUNT": "1",
        "COGWORKER_CONCURRENCY": "1",
    }
    group = ctx.start(system, "payload-copies", env)
    try:
        wait_for(lambda: ctx.done() >= PROFILE_JOBS, 300.0, f"{PROFILE_JOBS} profiled jobs", group)
        reports = [orjson.loads(raw) for raw in ctx.client.lrange(copyprobe.COPIES, 0, -1)]
    finally:
        ctx.stop(group)
    ran: Counter[str] = Counter()
    for found in reports:
        for name, n in found.items():
            ran[name] = max(ran[name], n) if name.endswith(PEAK) else ran[name] + n
    ctx.redis.flush()
    push_line = _per_job(pushed, PROFILE_JOBS)
    # The last job's acknowledgement comes after the last report: the run side's figures cover
    # PROFILE_JOBS fetches and PROFILE_JOBS - 1 acknowledgements.
    run_line = _per_job(ran, PROFILE_JOBS)
    say(f"payload copies of {size:,} B per job: push {push_line}; run {run_line}")
    pushed_total = sum(n for name, n in pushed.items() if not name.endswith(PEAK)) / PROFILE_JOBS
    ran_total = sum(n for name, n in ran.items() if not name.endswith(PEAK)) / PROFILE_JOBS
    return {
        "notes": [
            f"cogworker heap profile ({size:,} B argument, {PROFILE_JOBS} jobs, copyprobe.py): "
            f"payload-sized allocations per job, by the C function that made them. "
            f"Push (push_bulk): {push_line}. Run (fetch, decode, run, acknowledge; 1 process x 1 thread): "
            f"{run_line}."
        ],
        # What each side can't do without: pushing, the encoded payload and the buffer it is sent
        # from; running, the reply read, the job's decoded arguments and the acknowledgement's buffer
        # (an LREM names the payload itself). Anything more is a copy of a copy.
        "target": Target(
            "cogworker copies the payload no more than once per job on each side: pushing, the encoded "
            "payload and its send buffer; running, the reply, the decoded arguments and the "
            "acknowledgement's send buffer",
            pushed_total <= 2.05 and ran_total <= 3.05,
            f"push {pushed_total:.2f} (at most 2), run {ran_total:.2f} (at most 3) payload-sized "
            "allocations per job",
        ),
    }


def _per_job(found: Counter[str], jobs: int) -> str:
    made = Counter({name: n for name, n in found.items() if not name.endswith(PEAK)})
    peaks = {name: n for name, n in found.items() if name.endswith(PEAK)}
    shown = ", ".join(f"{name} {n / jobs:.2f}" for name, n in made.most_common()) or "none"
    if peaks:
        shown += "; working memory at most " + ", ".join(f"{name} {n}" for name, n in peaks.items())
    return shown
