"""Sharded layout, faults under load: a slot migrated, and a master SIGKILLed (its replica promoted), while
a swarm drains six queues, two on each master of a private 3-master + 3-replica cluster.

Each event has a fresh cluster. The jobs (jobs_cogworker.tagged, W1's body) count their runs by job and
by queue on the bench Redis, apart from the cluster, so a failover can't lose the count. The harness
samples each queue's count every 0.1 s and reports:
- lost: jobs pushed that never ran; twice: runs beyond the first (a kill may re-run the jobs that were in
  flight from the killed master: `in flight` is what its in-progress lists held just before the kill);
- the other queues' pace (the queues on masters the event doesn't touch) in the 2 s before the event,
  during it (the kill to the promotion as CLUSTER SLOTS shows it; the migration's own time), and in the
  2 s after; and the hit queue's pace during it. A window is cut where the first of its queues runs
  dry (none if that was before it began).
The victim is a master that doesn't hold the home slot (every process's heartbeat is there).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import jobkit
import systems
from context import Context
from curve import Curve, Metric
from systems.base import System

import cogworker
from curves._cluster import BenchCluster, partition_slot, queues_on
from curves._shard_drain import Layout, push_spread

TITLE = "Sharded layout: a slot migrated, a master SIGKILLed under load (lost, doubled, other queues' pace)"
MIGRATE, KILL = "migrate a slot", "SIGKILL a master"
# Enough that every queue still has a backlog when a failover ends (about 5 s after the kill here).
PER_QUEUE, QUICK_PER_QUEUE = 20_000, 12_000
SAMPLE_S = 0.1
AROUND_S = 2.0
STALL_S = 30.0


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    curve = Curve(
        name="shards-faults",
        title="Sharded layout: faults under load",
        x_label="event, while six queues drain",
        metrics=[
            Metric("lost", "jobs lost", "", "↓"),
            Metric("twice", "runs beyond the first", "", "↓"),
            Metric("in_flight", "in flight from the killed master", "", ""),
            Metric("others_before", "other queues, 2 s before", "jobs/s", "↑"),
            Metric("others_during", "other queues, during the event", "jobs/s", "↑"),
            Metric("others_after", "other queues, 2 s after", "jobs/s", "↑"),
            Metric("hit_during", "the hit queue, during the event", "jobs/s", ""),
            Metric("event_s", "the event's length", "s", ""),
        ],
    )
    system = systems.load("cogworker", ctx.redis.url)
    per_queue = QUICK_PER_QUEUE if ctx.plan.quick else PER_QUEUE
    try:
        for event in (MIGRATE, KILL):
            cluster = BenchCluster()
            try:
                found = one_event(ctx, cluster, system, event, per_queue, say)
                curve.add("sharded", event, **found)
            except Exception as exc:  # the other event's figures still count
                curve.notes.append(f"{event}: not measured: {type(exc).__name__}: {exc}")
                say(f"shards-faults: {curve.notes[-1]}")
            finally:
                ctx.kill_all()
                cluster.close()
    finally:
        system.close()
        cogworker.configure(cogworker.load_settings(redis_url=ctx.redis.url))
    curve.notes.append(
        f"Six queues, two per master, {per_queue:,} no-op jobs each, pushed before the swarm starts (2 "
        "processes x 8 threads); the event comes once a quarter of them are done. Pace: jobs done per "
        f"second from each queue's count, sampled every {SAMPLE_S} s. Node timeout 3 s."
    )
    return [curve]


def one_event(
    ctx: Context,
    cluster: BenchCluster,
    system: System,
    event: str,
    per_queue: int,
    say: Callable[[str], None],
) -> dict[str, float | None]:
    masters = cluster.masters()
    victim = next(port for port in masters if port != cluster.home_master())
    queues = queues_on(cluster, masters, 2)
    on_victim = [q for q in queues if cluster.master_of(partition_slot(q)) == victim]
    hit = on_victim[0]
    others = [q for q in queues if q not in on_victim]
    layout = Layout("sharded", True, tuple(queues))
    total = per_queue * len(queues)
    ctx.redis.flush()
    cluster.flush()
    push_spread(layout, cluster.url(), "tagged", total, args=lambda queue, i: (queue, i))
    samples: Samples = []

    def sample() -> None:
        counts = ctx.client.mget([jobkit.PER_QUEUE + q for q in queues])
        samples.append((time.monotonic(), {q: int(c or 0) for q, c in zip(queues, counts, strict=True)}))

    group = ctx.start(system, f"shards-faults-{event.split()[0]}", layout.env(cluster.url()))
    in_flight: float | None = None
    try:
        wait_sampling(lambda: ctx.done() >= total // 4, sample, group.ensure_alive, "a quarter done")
        began = time.monotonic()
        if event == KILL:
            in_flight = float(in_progress(cluster, victim))
            cluster.kill(victim)
            slot = partition_slot(hit)
            wait_sampling(lambda: cluster.master_of(slot) != victim, sample, group.ensure_alive, "promotion")
        else:
            mover = threading.Thread(target=cluster.cluster.migrate, args=(partition_slot(hit),))
            mover.start()
            wait_sampling(lambda: not mover.is_alive(), sample, group.ensure_alive, "the migration")
        ended = time.monotonic()
        wait_sampling(lambda: ctx.done() >= total, sample, group.ensure_alive, "every job", stall=ctx.done)
    finally:
        ctx.stop(group)
    # Every sample, beside the workers' log: the raw series the paces are read from.
    with open(ctx.log_dir / f"shards-faults-{event.split()[0]}.samples", "w") as out:
        out.write(f"# event from {began:.3f} to {ended:.3f}; hit {hit}, others {' '.join(others)}\n")
        for at, counts in samples:
            out.write(f"{at:.3f} " + " ".join(f"{q}={n}" for q, n in counts.items()) + "\n")
    runs = [int(n) for n in ctx.client.hvals(jobkit.RUNS)]
    found: dict[str, float | None] = {
        "lost": float(total - len(runs)),
        "twice": float(sum(n - 1 for n in runs)),
        "in_flight": in_flight,
        "others_before": pace(samples, others, began - AROUND_S, began, per_queue),
        "others_during": pace(samples, others, began, ended, per_queue),
        "others_after": pace(samples, others, ended, ended + AROUND_S, per_queue),
        "hit_during": pace(samples, [hit], began, ended, per_queue),
        "event_s": ended - began,
    }
    say(f"shards-faults: {event}: " + ", ".join(f"{k} {v:,.1f}" for k, v in found.items() if v is not None))
    return found


def wait_sampling(
    condition: Callable[[], bool],
    sample: Callable[[], None],
    alive: Callable[[], None],
    what: str,
    stall: Callable[[], int] | None = None,
) -> None:
    """Sample each queue's count every SAMPLE_S until `condition` holds; give up after STALL_S without
    progress (`stall` says what progress is; without it, STALL_S in all)."""
    seen: Any = None
    moved_at = time.monotonic()
    while not condition():
        alive()
        sample()
        now = stall() if stall else None
        if now != seen:
            seen, moved_at = now, time.monotonic()
        if time.monotonic() - moved_at > STALL_S:
            raise TimeoutError(f"shards-faults: no progress for {STALL_S:.0f} s waiting for {what}")
        time.sleep(SAMPLE_S)
    sample()


Samples = list[tuple[float, dict[str, int]]]


def pace(samples: Samples, queues: list[str], start: float, end: float, total: int) -> float | None:
    """Jobs/s the `queues` completed from `start` to `end`, read from the samples nearest after each,
    and only while every one of them still had jobs (of `total` each) waiting: a queue run dry would
    count as slowed down."""
    dry = next((at for at, counts in samples if any(counts[q] >= total for q in queues)), None)
    if dry is not None:
        end = min(end, dry)
    times = [at for at, _ in samples]
    first, last = bisect_left(times, start), bisect_left(times, end)
    if first >= len(samples) or last >= len(samples) or samples[last][0] <= samples[first][0]:
        return None
    (t0, c0), (t1, c1) = samples[first], samples[last]
    return sum(c1[q] - c0[q] for q in queues) / (t1 - t0)


def in_progress(cluster: BenchCluster, port: int) -> int:
    """Jobs in the in-progress lists on one master: what its processes had fetched and not acked."""
    client = cluster.client(port)
    return sum(int(client.llen(key)) for key in client.scan_iter(match="*inprogress*", count=1000))
