"""Scheduled and retry sets: what a system's scheduled-job poller costs, and how late it enqueues, as
the sets grow while the due load stays the same.

Each point fills the schedule set with N entries due in a day and the retry set with N/10, written
straight into each system's own sets in its own format (pipelined ZADDs), then adds the due load:
DUE entries, nine in ten scheduled and one in ten retries, due evenly over WINDOW_S seconds. The
workers start; while nothing is due (IDLE) the Redis and worker CPU they spend is what the sets that
aren't due cost. Then the due load runs.

The due jobs name a queue no worker reads, so the worker processes' CPU in that window is the poller's
(and the idle baseline, taken out), and how late each job was enqueued is read from that queue's
length, sampled every SAMPLE_S: the k-th job to arrive is matched with the k-th due time. A job is
then at most SAMPLE_S later than measured; sampling costs the same for every system and is taken out
of the command counts.

Sidekiq + YJIT runs its own scheduled poller (Sidekiq::Scheduled::Poller) at its defaults:
average_scheduled_poll_interval 5 s, which each process scales by the number of processes, so the two
processes together poll every 5 s on average. Dramatiq has no such sets: a delayed message goes to
its queue's delay queue, which the workers fetch at once and hold in memory until the message's eta,
so it is not comparable and is left out.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import systems
from context import Context
from curve import Curve, Metric, Target
from procs import WorkerGroup, cpu_seconds, wait_for
from redis_server import delta
from systems.base import System

TITLE = "Scheduled and retry sets: poller CPU per due job, lateness, and the cost of sets not due"

PEERS = {"cogworker": "cogworker", "sidekiq-yjit": "Sidekiq + YJIT"}
DUE_QUEUE = "due"  # no worker reads it: the due jobs wait there, counted
SAMPLE_S = 0.05
CHUNK = 1_000  # entries per ZADD


@dataclass(frozen=True)
class Sizes:
    not_due: tuple[int, ...]
    due: int
    window_s: float
    idle_s: float


FULL = Sizes(not_due=(10_000, 100_000, 1_000_000), due=100_000, window_s=60.0, idle_s=10.0)
QUICK = Sizes(not_due=(10_000, 100_000), due=2_000, window_s=5.0, idle_s=4.0)


@dataclass(frozen=True)
class Format:
    """Where a system keeps its sets and queues, and how an entry reads."""

    schedule: str
    retry: str
    queue: str
    job_class: str

    def entry(self, index: int, kind: str) -> str:
        now = time.time()
        job: dict[str, object] = {
            "class": self.job_class,
            "args": [],
            "queue": DUE_QUEUE,
            "jid": f"{kind}{index:08x}{os.urandom(4).hex()}",
            "created_at": now,
            "retry": True,
        }
        if kind == "r":
            job.update(retry_count=0, error_message="boom", error_class="RuntimeError", failed_at=now)
        return json.dumps(job)


FORMATS = {
    "cogworker": Format(
        "cogworker:schedule", "cogworker:retry", f"cogworker:queue:{DUE_QUEUE}", "jobs_cogworker.noop"
    ),
    "sidekiq-yjit": Format("schedule", "retry", f"queue:{DUE_QUEUE}", "NoopJob"),
}


def fill(ctx: Context, fmt: Format, key: str, kind: str, scores: list[float], first: int) -> None:
    pipe = ctx.client.pipeline(transaction=False)
    for start in range(0, len(scores), CHUNK):
        chunk = scores[start : start + CHUNK]
        mapping = {fmt.entry(first + start + i, kind): score for i, score in enumerate(chunk)}
        pipe.zadd(key, mapping)
        if len(pipe) >= 20:
            pipe.execute()
    pipe.execute()


def workers_cpu(group: WorkerGroup) -> float:
    return cpu_seconds([proc for child in group.children() for proc in group.subtree(child)])


def measure(ctx: Context, name: str, system: System, not_due: int, sizes: Sizes) -> dict[str, float | None]:
    fmt = FORMATS[name]
    ctx.redis.flush()
    memory_before = int(ctx.client.info("memory")["used_memory"])
    later = time.time() + 86_400
    fill(ctx, fmt, fmt.schedule, "s", [later + i * 1e-3 for i in range(not_due)], 0)
    fill(ctx, fmt, fmt.retry, "r", [later + i * 1e-3 for i in range(not_due // 10)], 0)
    entries = not_due + not_due // 10
    bytes_per_entry = (int(ctx.client.info("memory")["used_memory"]) - memory_before) / entries
    # The due load, placed after the workers' start and the idle window (ready within 10 s).
    start_due = time.time() + 10.0 + sizes.idle_s
    step = sizes.window_s / sizes.due
    due_times = [start_due + i * step for i in range(sizes.due)]
    retries = set(range(0, sizes.due, 10))
    fill(ctx, fmt, fmt.schedule, "s", [t for i, t in enumerate(due_times) if i not in retries], not_due)
    fill(ctx, fmt, fmt.retry, "r", [t for i, t in enumerate(due_times) if i in retries], not_due)

    group = ctx.start(system, f"sets-{not_due}")
    try:
        ctx.wait_ready(system, group)
        ready_left = start_due - sizes.idle_s - 0.5 - time.time()
        if ready_left < 0:
            raise RuntimeError(
                f"workers took too long to start: {-ready_left:.1f} s past the idle window's start"
            )
        time.sleep(ready_left)
        # Idle: every set full, nothing due.
        cpu0, redis0, calls0, t0 = (
            workers_cpu(group),
            ctx.redis.cpu_s(),
            ctx.redis.commandstats(),
            time.monotonic(),
        )
        time.sleep(sizes.idle_s)
        cpu1, redis1, calls1, t1 = (
            workers_cpu(group),
            ctx.redis.cpu_s(),
            ctx.redis.commandstats(),
            time.monotonic(),
        )
        idle_s = t1 - t0
        idle_calls = sum(delta(calls0, calls1).values())
        # Due: sample the due queue's length until every due job is on it.
        arrivals: list[tuple[float, int]] = []
        polls = 0

        def all_enqueued() -> bool:
            nonlocal polls
            polls += 1
            count = int(ctx.client.llen(fmt.queue))
            arrivals.append((time.time(), count))
            return count >= sizes.due

        wait_for(
            all_enqueued,
            sizes.window_s + 60.0,
            f"{sizes.due} due jobs to be enqueued",
            group,
            step_s=SAMPLE_S,
        )
        cpu2, redis2, calls2, t2 = (
            workers_cpu(group),
            ctx.redis.cpu_s(),
            ctx.redis.commandstats(),
            time.monotonic(),
        )
    finally:
        ctx.stop(group)
    due_s = t2 - t1
    idle_worker_rate = (cpu1 - cpu0) / idle_s
    idle_redis_rate = (redis1 - redis0) / idle_s
    due_calls = sum(delta(calls1, calls2).values()) - polls - idle_calls / idle_s * due_s
    late = lateness(arrivals, due_times)
    return {
        "poller_cpu_us": ((cpu2 - cpu1) - idle_worker_rate * due_s) * 1e6 / sizes.due,
        "redis_cpu_us": ((redis2 - redis1) - idle_redis_rate * due_s) * 1e6 / sizes.due,
        "commands": due_calls / sizes.due,
        "late_p50_ms": late[0],
        "late_p99_ms": late[1],
        "idle_redis_ms": idle_redis_rate * 1e3,
        "idle_worker_ms": idle_worker_rate * 1e3,
        "idle_commands": idle_calls / idle_s,
        "bytes_per_entry": bytes_per_entry,
    }


def lateness(arrivals: list[tuple[float, int]], due_times: list[float]) -> tuple[float, float]:
    """p50 and p99 in ms: the k-th job to arrive against the k-th due time, each job taken as
    arrived at the first sample that counted it."""
    late: list[float] = []
    seen = 0
    for at, count in arrivals:
        for k in range(seen, min(count, len(due_times))):
            late.append(max(0.0, at - due_times[k]) * 1e3)
        seen = max(seen, count)
    if len(late) < 2:
        return (late[0], late[0]) if late else (0.0, 0.0)
    cuts = statistics.quantiles(late, n=100)
    return statistics.median(late), cuts[98]


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    sizes = QUICK if ctx.plan.quick else FULL
    curve = Curve(
        name="sets",
        title="Scheduled and retry sets",
        x_label=(
            f"scheduled entries not due, N (+ N/10 retries; {sizes.due:,} coming due over "
            f"{sizes.window_s:.0f} s)"
        ),
        x_log=True,
        metrics=[
            Metric("poller_cpu_us", "poller CPU per due job", "µs", "↓"),
            Metric("late_p50_ms", "lateness p50", "ms", "↓", log=True),
            Metric("late_p99_ms", "lateness p99", "ms", "↓", log=True),
            Metric("idle_redis_ms", "Redis CPU while nothing is due", "ms/s", "↓"),
            Metric("idle_worker_ms", "worker CPU while nothing is due", "ms/s", "↓"),
            Metric("redis_cpu_us", "Redis CPU per due job", "µs", "↓"),
            Metric("commands", "Redis commands per due job", "", "↓"),
            Metric("bytes_per_entry", "Redis memory per set entry", "B", "↓"),
        ],
    )
    # One round: a full point takes a minute and a half (the due window is the minute).
    rounds = 1
    loaded: dict[str, System] = {}
    try:
        for name in PEERS:
            try:
                loaded[name] = systems.load(name, ctx.redis.url)
            except Exception as exc:
                curve.notes.append(f"{PEERS[name]} not measured: {exc}")
        for index in range(rounds):
            for not_due in sizes.not_due:
                for name, system in loaded.items():
                    say(f"sets: round {index + 1}, {PEERS[name]}, {not_due:,} not due ...")
                    try:
                        curve.add(PEERS[name], not_due, **measure(ctx, name, system, not_due, sizes))
                    finally:
                        ctx.kill_all()
    finally:
        for system in loaded.values():
            system.close()
    judge(curve, sizes)
    curve.notes += [
        "Sidekiq + YJIT: its own scheduled poller at its defaults (average_scheduled_poll_interval 5 s, "
        "scaled by the process count: the two processes together poll every 5 s on average).",
        "cogworker: defaults (COGWORKER_POLL_INTERVAL_S 5 s per process, randomised 0.5-1.5x; entries "
        "falling due between polls are enqueued 0.1-0.2 s after their time).",
        "Dramatiq not measured: a delayed message (and a retry) goes to its queue's delay queue, which "
        "workers fetch at once and hold in memory until its eta; it keeps no set a poller scans.",
        f"Lateness is read from the due queue's length every {SAMPLE_S * 1e3:.0f} ms: up to that much "
        "later than measured.",
    ]
    return [curve]


def judge(curve: Curve, sizes: Sizes) -> None:
    small, big = sizes.not_due[0], sizes.not_due[-1]
    series = "cogworker"
    per_small = curve.value(series, small, "poller_cpu_us")
    per_big = curve.value(series, big, "poller_cpu_us")
    idle_small = curve.value(series, small, "idle_redis_ms")
    idle_big = curve.value(series, big, "idle_redis_ms")
    if None in (per_small, per_big, idle_small, idle_big):
        curve.targets.append(
            Target("cost proportional to the due jobs, not the set size", None, "a point is missing")
        )
    else:
        assert (
            per_small is not None and per_big is not None and idle_small is not None and idle_big is not None
        )
        # Flat within a quarter (this machine drifts that much), or within 1 ms/s of idle Redis CPU.
        flat = per_big <= 1.25 * per_small + 5 and idle_big <= 1.25 * idle_small + 1.0
        curve.targets.append(
            Target(
                "cost proportional to the due jobs, not the set size",
                flat,
                f"poller CPU per due job {per_small:.0f} µs at {small:,} not due, "
                f"{per_big:.0f} µs at {big:,}; Redis CPU while nothing is due "
                f"{idle_small:.2f} and {idle_big:.2f} ms/s",
            )
        )
    worst = [v for x in sizes.not_due if (v := curve.value(series, x, "late_p99_ms")) is not None]
    curve.targets.append(
        Target(
            "p99 lateness ≤ 1 s",
            None if len(worst) < len(sizes.not_due) else max(worst) <= 1_000,
            f"worst p99 over the sizes {max(worst):,.0f} ms" if worst else "a point is missing",
        )
    )
