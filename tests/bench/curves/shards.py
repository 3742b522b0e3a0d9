"""Sharded layout (COGWORKER_CLUSTER_SHARDING=queues): how a drain's Redis work spreads over a cluster's
masters, and the capacity model that follows from it, on a private 3-master + 3-replica cluster.

Load spread: W1's drain (no-op jobs, pushed before the swarm starts) over six queues, and over one
queue of six partitions (COGWORKER_QUEUE_PARTITIONS), in the sharded layout and in the one-slot layout
(prefix `{cw}:`, every key on one master) on the same cluster; the layouts take turns round by round,
and each figure is the median of the rounds. Per master: INFO cpu and commandstats in the backlog
window, per job (_shard_drain.py). The queue names are picked so their slots fall two on each master,
and the partitioned queue's name so its six partitions do too (_cluster.py).

Capacity model: a master runs commands on one core, so a deployment saturates when its busiest master
does: jobs/s = (CPU one master may use) / (busiest master's Redis CPU per job). Spread evenly over N
masters, the busiest carries 1/N of the summed CPU per job c, so jobs/s = N x quota / c, with c
measured where it applies: every master saturated (a master at partial load spends more per job).
The check: the same drain with the six queues on 1, 2 and 3 masters, every master's
redis-server in a cgroup of its own limited to the same CPU quota, sized so one master saturates at a
fifth of what the swarm drains unlimited (on 2 cores the workers, not Redis, would otherwise set
the pace). Faults under load are their own curve (shards_faults.py).
"""

from __future__ import annotations

from collections.abc import Callable

import systems
from context import Context
from curve import Curve, Metric, Target
from systems.base import System

import cogworker
from curves._cluster import BenchCluster, CpuQuota, partitioned_queue, queues_on
from curves._shard_drain import Drained, Layout, drain

TITLE = "Sharded layout: each master's share of Redis CPU per job, and the capacity model (3-master cluster)"
QUEUES = 6
PARTITIONS = 6
BUSIEST_MAX_PCT = 40.0
SUM_WITHIN = 0.15
# The capacity check's swarm: a quota below a tenth of a core comes as 1 ms every period of 10 ms or
# more (1 ms is the kernel's floor), so a throttled master answers about once a period. To keep it
# busy for its whole millisecond, every period must bring it more work than that: 4 processes of 64
# threads, each fetch a batch of up to 96 jobs.
CAPACITY_ENV = {"COGWORKER_COUNT": "4", "COGWORKER_CONCURRENCY": "64"}
ONE_MASTER_SHARE_OF_SWARM = 0.2
MODEL_WITHIN = 0.25
# Even a --quick run drains this many: a smaller window passes between two of the harness's polls.
MIN_JOBS = 10_000
SIX, HOT = f"{QUEUES} queues", f"1 queue x {PARTITIONS} partitions"


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    system = systems.load("cogworker", ctx.redis.url)
    cluster = BenchCluster()
    try:
        spread = measure_spread(ctx, cluster, system, say)
        capacity = measure_capacity(ctx, cluster, system, say)
    finally:
        cluster.close()
        system.close()
        # Back to the bench Redis for the curves after this one.
        cogworker.configure(cogworker.load_settings(redis_url=ctx.redis.url))
    return [spread, capacity]


def spread_curve() -> Curve:
    per_master = [
        Metric(f"{kind}_{letter}", f"master {letter}: {label}", unit, "↓")
        for kind, label, unit in (("cpu_us", "Redis CPU per job", "µs"), ("commands", "commands per job", ""))
        for letter in "ABC"
    ]
    return Curve(
        name="shards",
        title="Sharded layout: load spread over 3 masters",
        x_label="W1's no-op drain over",
        metrics=[
            Metric("jobs_per_s", "throughput", "jobs/s", "↑"),
            Metric("busiest_pct", "busiest master's share of Redis CPU", "%", "↓"),
            Metric("redis_cpu_us", "Redis CPU per job, all masters", "µs", "↓"),
            Metric("commands", "Redis commands per job, all masters", "", "↓"),
            Metric("scripts", "script calls per job, all masters", "", "↓"),
            *per_master,
            Metric("replica_cpu_us", "replicas' CPU per job", "µs", "↓"),
            Metric("worker_cpu_us", "worker CPU per job", "µs", "↓"),
        ],
    )


def measure_spread(ctx: Context, cluster: BenchCluster, system: System, say: Callable[[str], None]) -> Curve:
    curve = spread_curve()
    masters = cluster.masters()
    six = tuple(queues_on(cluster, masters, QUEUES // len(masters)))
    hot = partitioned_queue(cluster, PARTITIONS)
    workloads = {
        SIX: (Layout("one slot", False, six), Layout("sharded", True, six)),
        HOT: (Layout("one slot", False, (hot,)), Layout("sharded", True, (hot,), f"{hot}={PARTITIONS}")),
    }
    jobs = max(MIN_JOBS, ctx.plan.w1_jobs)
    last: Drained | None = None
    for index in range(ctx.plan.w1_runs):
        for workload, layouts in workloads.items():
            for layout in layouts:
                try:
                    found = drain(ctx, cluster, system, layout, jobs, f"shards-{layout.series}")
                except Exception as exc:  # one layout that can't drain must not cost the other's figures
                    failed = f"{workload}, {layout.series}: not measured: {type(exc).__name__}: {exc}"
                    say(f"shards: {failed}")
                    if failed not in curve.notes:
                        curve.notes.append(failed)
                    ctx.kill_all()
                    continue
                curve.add(layout.series, workload, **found.figures())
                last = found
                say(
                    f"shards: round {index + 1}, {workload}, {layout.series}: "
                    f"{found.jobs_per_s:,.0f} jobs/s, Redis {found.redis_cpu_us:.1f} µs/job, "
                    f"busiest master {found.busiest_pct:.0f} %, "
                    + ", ".join(f"{k} {v:.1f}" for k, v in found.cpu_us.items())
                )
    judge_spread(curve)
    roles = ", ".join(f"{letter} holds {tags}" for letter, tags in (last.roles if last else {}).items())
    curve.notes.append(
        f"Masters A, B, C by port; {roles}. Six queues: {', '.join(six)} (two on each master); the "
        f"partitioned queue {hot}, {PARTITIONS} partitions, two on each master. Each point: the median of "
        f"{ctx.plan.w1_runs} drains of {jobs:,} no-op jobs, measured from a tenth done to nine tenths; "
        "the layouts took turns round by round."
    )
    curve.notes.append(
        "Redis CPU: INFO cpu (used_cpu_user + used_cpu_sys) of each master in the window; commands: "
        "INFO commandstats, a script's own commands counted too (as everywhere in make bench). The jobs "
        "report to the bench's own Redis, not the cluster. Replicas' CPU is shown apart."
    )
    return curve


def judge_spread(curve: Curve) -> None:
    for workload in (SIX, HOT):
        share = curve.value("sharded", workload, "busiest_pct")
        one_slot = curve.value("one slot", workload, "busiest_pct") or 0.0
        curve.targets.append(
            Target(
                f"{workload}: the busiest master carries ≤ {BUSIEST_MAX_PCT:.0f} % of Redis CPU",
                None if share is None else share <= BUSIEST_MAX_PCT,
                "a point is missing" if share is None else f"{share:.0f} % (one slot: {one_slot:.0f} %)",
            )
        )
        ours = curve.value("sharded", workload, "redis_cpu_us")
        base = curve.value("one slot", workload, "redis_cpu_us")
        curve.targets.append(
            Target(
                f"{workload}: Redis CPU per job, all masters, within {SUM_WITHIN:.0%} of the one-slot figure",
                None if ours is None or base is None else ours <= base * (1 + SUM_WITHIN),
                "a point is missing"
                if ours is None or base is None
                else f"{ours:.1f} µs against {base:.1f} µs ({ours / base - 1:+.0%})",
            )
        )


def capacity_curve() -> Curve:
    return Curve(
        name="shards-capacity",
        title="Sharded layout: capacity with every master limited to the same CPU",
        x_label="masters the six queues are on",
        metrics=[
            Metric("jobs_per_s", "throughput", "jobs/s", "↑"),
            Metric("busiest_cpu_us", "busiest master's Redis CPU per job", "µs", "↓"),
            Metric("busiest_load_pct", "busiest master's CPU use, of its quota", "%", ""),
        ],
    )


def measure_capacity(
    ctx: Context, cluster: BenchCluster, system: System, say: Callable[[str], None]
) -> Curve:
    curve = capacity_curve()
    why_not = CpuQuota.available()
    if why_not is not None:
        curve.notes.append(f"Not measured: {why_not}.")
        return curve
    masters = cluster.masters()
    spread = Layout("sharded", True, tuple(queues_on(cluster, masters, QUEUES // len(masters))))
    jobs = max(MIN_JOBS, ctx.plan.w1_jobs)
    say("shards: capacity, an unlimited drain to size the quota ...")
    try:
        free = drain(ctx, cluster, system, spread, jobs, "shards-capacity-free", CAPACITY_ENV)
    except Exception as exc:
        ctx.kill_all()
        curve.notes.append(f"Not measured: the sharded drain failed: {type(exc).__name__}: {exc}")
        return curve
    share = ONE_MASTER_SHARE_OF_SWARM * free.jobs_per_s * free.redis_cpu_us / 1e6
    quota = CpuQuota(share)
    limited_jobs = max(1_000, round(free.jobs_per_s * 2))
    layouts = {
        n: Layout("measured", True, tuple(queues_on(cluster, masters[:n], QUEUES // n)))
        for n in range(1, len(masters) + 1)
    }
    one_slot = Layout("one slot, measured", False, spread.queues)
    try:
        for port in masters:
            quota.add(cluster.pid_of(port))
        for index in range(max(1, ctx.plan.w1_runs - 1)):
            for n, layout in [*layouts.items(), (1, one_slot)]:
                found = drain(
                    ctx, cluster, system, layout, limited_jobs, f"shards-capacity-{n}", CAPACITY_ENV
                )
                load = found.jobs_per_s * max(found.cpu_us.values()) / 1e6 / quota.share
                curve.add(layout.series, str(n), **found.figures(), busiest_load_pct=100.0 * load)
                say(
                    f"shards: capacity round {index + 1}, {layout.series} on {n} master(s): "
                    f"{found.jobs_per_s:,.0f} jobs/s, busiest {max(found.cpu_us.values()):.1f} µs/job at "
                    f"{100 * load:.0f} % of its quota"
                )
    finally:
        quota.close()
    # The model's c: Redis CPU per job summed over every master, with every master saturated (the
    # queues on all of them). A light-load c (the unlimited drain's) is drawn beside it: it is what a
    # projection from an ordinary run would use, and it overstates the cost of a busy master's job.
    most = str(len(masters))
    saturated = curve.value("measured", most, "redis_cpu_us")
    one = curve.value("measured", "1", "jobs_per_s")
    for n in layouts:
        model = None if saturated is None else n * quota.share / (saturated / 1e6)
        curve.add("model", str(n), jobs_per_s=model)
        curve.add("model, light-load c", str(n), jobs_per_s=n * quota.share / (free.redis_cpu_us / 1e6))
        # The other way to project: one saturated master's measured rate, times N.
        curve.add("N x one master", str(n), jobs_per_s=None if one is None else n * one)
    judge_capacity(curve, list(layouts))
    curve.notes.append(
        f"Model: N x quota / c, c = {saturated or 0:.1f} µs of Redis CPU per job summed over the masters "
        f"with all {most} saturated; light-load c = {free.redis_cpu_us:.1f} µs (the unlimited drain)."
    )
    curve.notes.append(
        f"Quota: each master's redis-server in a cgroup of its own, {quota.quota_us} µs of CPU every "
        f"{quota.period_us} µs ({100 * quota.share:.1f} % of a core), sized so one master saturates at "
        f"{ONE_MASTER_SHARE_OF_SWARM:.0%} of the unlimited drain ({free.jobs_per_s:,.0f} jobs/s, "
        f"{free.redis_cpu_us:.1f} µs of Redis CPU per job summed over the masters). "
        f"Swarm: {CAPACITY_ENV['COGWORKER_COUNT']} processes x "
        f"{CAPACITY_ENV['COGWORKER_CONCURRENCY']} threads, "
        f"{limited_jobs:,} jobs a drain."
    )
    return curve


def judge_capacity(curve: Curve, counts: list[int]) -> None:
    pairs = [
        (n, curve.value("measured", str(n), "jobs_per_s"), curve.value("model", str(n), "jobs_per_s"))
        for n in counts
    ]
    missing = any(m is None or p is None for _, m, p in pairs)
    detail = ", ".join(f"{n}: {m or 0:,.0f} of {p or 0:,.0f}" for n, m, p in pairs)
    curve.targets.append(
        Target(
            f"measured jobs/s within {MODEL_WITHIN:.0%} of the model on 1, 2 and 3 masters",
            None if missing else all(abs((m or 0) / (p or 1) - 1) <= MODEL_WITHIN for _, m, p in pairs),
            "a point is missing" if missing else f"measured of model jobs/s by masters, {detail}",
        )
    )
