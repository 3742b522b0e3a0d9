"""Backlog: how the drain rate and the cost per job grow with the jobs already queued.

At each size (10k, 100k, 1M, 5M no-op jobs) each system's queue is filled, its workers started, and a
sample drained: the first SAMPLE jobs (all of them at 10k), measured from a tenth of the sample done
to nine tenths (_drain.py), while the rest of the backlog stays queued. The cost of a job depends on
what is queued behind it, not on how many of them run, so draining a fixed sample measures the same
thing as draining all 5M, in a fraction of the time.

The fill: one job pushed through the system's own client is read back and used as a template; the
backlog is that entry with fresh ids (a jid; dramatiq's two uuids), pushed in pipelined chunks of
10,000 (LPUSH for cogworker and Sidekiq, as their clients push; HSET + RPUSH for dramatiq, as its
enqueue script writes). The jobs share one created_at/enqueued_at, which costs no system anything.
Redis bytes per queued job: INFO used_memory after the fill less before it, over the jobs queued.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import systems
from context import Context
from curve import Curve, Metric, Target

from curves._drain import SERIES, drain_window, entry_bytes, fill, raw_client, template_of, used_memory

TITLE = "Backlog: drain rate and cost per job with 10k, 100k, 1M and 5M no-op jobs queued"
SAMPLE = 50_000
ROUNDS = 3
FULL_SIZES = (10_000, 100_000, 1_000_000, 5_000_000)
QUICK_SIZES = (5_000, 50_000)
FLAT_UP_TO = 1_000_000  # the flatness target's range: 10k to 1M
FLAT_WITHIN = 0.10


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    sizes = QUICK_SIZES if ctx.plan.quick else FULL_SIZES
    sample = SAMPLE if not ctx.plan.quick else 5_000
    rounds = 1 if ctx.plan.quick else ROUNDS
    cost = Curve(
        "backlog",
        "Backlog: drain rate and cost per job by jobs queued",
        "jobs queued",
        [
            Metric("jobs_per_s", "drain rate", "jobs/s", "↑"),
            Metric("worker_cpu_us", "worker CPU per job", "µs", "↓"),
            Metric("redis_cpu_us", "Redis CPU per job", "µs", "↓"),
            Metric("commands", "Redis commands per job", "", "↓"),
        ],
        x_log=True,
    )
    space = Curve(
        "backlog-memory",
        "Backlog: Redis memory per queued job",
        "jobs queued",
        [
            Metric("bytes_per_job", "Redis bytes per queued job", "B", "↓"),
            Metric("payload_bytes", "stored entry", "B", "↓"),
            Metric("redis_mb", "Redis memory", "MB", "↓", log=True),
        ],
        x_log=True,
    )
    loaded = {name: systems.load(name, ctx.redis.url) for name in SERIES}
    client = raw_client(ctx)
    try:
        for index in range(rounds):
            for size in sizes:
                for name, system in loaded.items():
                    series = SERIES[name]
                    began = time.monotonic()
                    ctx.redis.flush()
                    template = template_of(system, client)
                    before = used_memory(ctx)
                    fill(client, template, size, say)
                    stored = used_memory(ctx)
                    space.add(
                        series,
                        size,
                        bytes_per_job=(stored - before) / size,
                        payload_bytes=entry_bytes(client, template),
                        redis_mb=stored / 2**20,
                        class_chars=template.class_chars,
                    )
                    target = min(size, sample)
                    found = drain_window(
                        ctx, system, f"backlog-{size}", target, target // 10, target * 9 // 10, 600.0
                    )
                    cost.add(series, size, **{k: found[k] for k in (m.key for m in cost.metrics)})
                    say(
                        f"backlog round {index + 1}/{rounds}, {size:,} queued, {series}: "
                        f"{found['jobs_per_s']:,.0f} jobs/s, {found['commands']:.2f} commands/job, "
                        f"{(stored - before) / size:.0f} B/job ({time.monotonic() - began:.0f} s)"
                    )
                    ctx.redis.flush()
    finally:
        client.close()
        for system in loaded.values():
            system.close()
        ctx.redis.flush()
    cost.notes.append(
        f"Each point drains the first {min(sample, max(sizes)):,} jobs of the backlog (all of it when "
        "smaller), measured from a tenth of them done to nine tenths; the rest stays queued. Worker CPU "
        "counts every process of the worker command; Redis CPU and commands include the jobs' own "
        "INCR of the bench counter alike for every system (its commands are taken out)."
    )
    cost.notes.append(
        "Fill: one job pushed by the system's own client, read back, and copied with fresh ids in "
        "pipelined chunks of 10,000 (cogworker, Sidekiq: LPUSH; dramatiq: HSET + RPUSH)."
    )
    space.notes.append(
        "Bytes per queued job: INFO used_memory after the fill less before it, over the jobs queued. "
        "Stored entry: one list entry's length (dramatiq: its hash's message plus the id in its list). "
        "cogworker's bench job is named jobs_cogworker.noop (19 characters), Sidekiq's NoopJob (7)."
    )
    cost.targets.append(_flat(cost, sizes))
    space.targets.append(_smaller(space, sizes))
    return [cost, space]


def _flat(curve: Curve, sizes: tuple[int, ...]) -> Target:
    text = "cogworker's cost per job flat within 10 % from 10k to 1M"
    shown = [s for s in sizes if s <= FLAT_UP_TO]
    spreads: dict[str, float] = {}
    for key in ("worker_cpu_us", "redis_cpu_us", "commands"):
        values = [v for s in shown if (v := curve.value("cogworker", s, key)) is not None and v > 0]
        if len(shown) < 2 or len(values) < len(shown):
            return Target(text, None, "too few sizes in this run")
        spreads[key] = max(values) / min(values) - 1
    shown_spreads = ", ".join(f"{key} {spread:+.0%}" for key, spread in spreads.items())
    return Target(
        text,
        all(spread <= FLAT_WITHIN for spread in spreads.values()),
        f"max/min - 1 over {shown[0]:,}..{shown[-1]:,}: {shown_spreads}",
    )


def _smaller(curve: Curve, sizes: tuple[int, ...]) -> Target:
    text = "cogworker's Redis bytes per queued job no more than Sidekiq's"
    size = sizes[-1]
    ours = curve.value("cogworker", size, "bytes_per_job")
    theirs = curve.value("Sidekiq + YJIT", size, "bytes_per_job")
    if ours is None or theirs is None:
        return Target(text, None, "a point is missing")
    entry = curve.value("cogworker", size, "payload_bytes") or 0.0
    their_entry = curve.value("Sidekiq + YJIT", size, "payload_bytes") or 0.0
    # The same job: the bench's jobs are named differently (jobs_cogworker.noop, NoopJob); a job
    # named alike in both (cogworker's @job(name=...)) is stored that many bytes apart less.
    names = (curve.value("cogworker", size, "class_chars") or 0.0) - (
        curve.value("Sidekiq + YJIT", size, "class_chars") or 0.0
    )
    return Target(
        text,
        ours - names <= theirs,
        f"at {size:,} queued: {ours:.0f} B against {theirs:.0f} B, {ours - names:.0f} B for a job named "
        f"as Sidekiq's ({names:.0f} characters less); stored entries {entry:.0f} and {their_entry:.0f} B",
    )
