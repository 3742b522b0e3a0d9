"""W1's drain on the bench cluster, in one key layout, with each master's CPU and commands per job.

The backlog is pushed through cogworker's own client (push_bulk, configured for the layout), spread
evenly over the layout's queues, before the swarm starts; the window is W1's backlog window (_drain.py):
from a tenth of the jobs done to nine tenths, while every worker still has jobs waiting. At each edge
the harness reads every master's and replica's INFO cpu and commandstats, the workers' CPU, and then
the done counter (on the bench Redis, not the cluster), so the figures divide by the jobs done between
the two edges.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Any

from context import Context
from procs import WorkerGroup, cpu_seconds
from systems.base import System

import cogworker
from cogworker.api import push_shards
from curves._cluster import ONE_SLOT_PREFIX, SHARDED_PREFIX, BenchCluster, NodeSample

POLL_S = 0.05
STALL_S = 30.0  # no job done for this long: the layout can't drain (a failed run, not a slow one)
MARKS = (0.1, 0.9)
LETTERS = "ABCDEF"
SCRIPTS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


@dataclass(frozen=True)
class Layout:
    """A deployment on the bench cluster: its key layout and the queues its swarm reads."""

    series: str  # "one slot", "sharded"
    sharded: bool
    queues: tuple[str, ...]
    partitions: str = ""  # COGWORKER_QUEUE_PARTITIONS ("hot3=6")

    def env(self, url: str) -> dict[str, str]:
        env = {
            "COGWORKER_REDIS_URL": url,
            "COGWORKER_KEY_PREFIX": SHARDED_PREFIX if self.sharded else ONE_SLOT_PREFIX,
            # Equal weights: each fetch takes the queues in a new random order, so they drain side by
            # side (listed bare, they would be strict: one queue, so one master, at a time).
            "COGWORKER_QUEUES": ",".join(f"{queue}:1" for queue in self.queues),
        }
        if self.sharded:
            env["COGWORKER_CLUSTER_SHARDING"] = "queues"
        if self.partitions:
            env["COGWORKER_QUEUE_PARTITIONS"] = self.partitions
        return env

    def configure_client(self, url: str) -> None:
        """Point this process's cogworker client (the pushes) at the layout."""
        overrides: dict[str, Any] = {
            "redis_url": url,
            "key_prefix": SHARDED_PREFIX if self.sharded else ONE_SLOT_PREFIX,
            "cluster_sharding": "queues" if self.sharded else "off",
        }
        if self.partitions:
            overrides["queue_partitions"] = self.partitions
        # The cluster was flushed since the last drain: the client must record the partition counts
        # in the home slot again, not trust that it did so once in this process.
        push_shards.forget_recorded()
        cogworker.configure(cogworker.load_settings(**overrides))


def push_spread(layout: Layout, url: str, job: str, jobs: int, args: Any = None) -> None:
    """`jobs` jobs of jobs_cogworker.<job>, spread evenly over the layout's queues. `args(queue, i)`
    gives a job's arguments (none by default)."""
    layout.configure_client(url)
    function = getattr(importlib.import_module("jobs_cogworker"), job)
    share, extra = divmod(jobs, len(layout.queues))
    for index, queue in enumerate(layout.queues):
        count = share + (1 if index < extra else 0)
        arguments = [args(queue, i) if args else () for i in range(count)]
        for begin in range(0, count, 10_000):
            cogworker.push_bulk(function, arguments[begin : begin + 10_000], queue=queue)


@dataclass
class Edge:
    at: float
    done: int
    nodes: dict[int, NodeSample]
    workers_cpu_s: float


@dataclass
class Drained:
    """One drain's window: per-master figures, by letter (A, B, C in port order)."""

    jobs: int
    seconds: float
    masters: dict[str, int]  # letter -> port
    cpu_us: dict[str, float]  # letter -> Redis CPU µs per job
    commands: dict[str, float]  # letter -> commands per job
    calls: dict[str, dict[str, int]]  # letter -> commandstats deltas in the window
    replica_cpu_us: float
    worker_cpu_us: float
    roles: dict[str, str] = field(default_factory=dict)  # letter -> "home", "{cw}"

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def redis_cpu_us(self) -> float:
        return sum(self.cpu_us.values())

    @property
    def busiest_pct(self) -> float:
        return 100.0 * max(self.cpu_us.values()) / self.redis_cpu_us

    def figures(self) -> dict[str, float | None]:
        found: dict[str, float | None] = {
            "jobs_per_s": self.jobs_per_s,
            "redis_cpu_us": self.redis_cpu_us,
            "busiest_pct": self.busiest_pct,
            "busiest_cpu_us": max(self.cpu_us.values()),
            "commands": sum(self.commands.values()),
            "scripts": sum(n for calls in self.calls.values() for c, n in calls.items() if c in SCRIPTS)
            / self.jobs,
            "replica_cpu_us": self.replica_cpu_us,
            "worker_cpu_us": self.worker_cpu_us,
        }
        for letter in self.masters:
            found[f"cpu_us_{letter}"] = self.cpu_us[letter]
            found[f"commands_{letter}"] = self.commands[letter]
        return found

    def as_dict(self) -> dict[str, Any]:
        return {"jobs_per_s": self.jobs_per_s, **self.__dict__}


def letters(cluster: BenchCluster) -> dict[str, int]:
    return dict(zip(LETTERS, cluster.masters(), strict=False))


def roles(cluster: BenchCluster, named: dict[str, int]) -> dict[str, str]:
    found: dict[str, list[str]] = {letter: [] for letter in named}
    for letter, port in named.items():
        if port == cluster.home_master():
            found[letter].append("{home}")
        if port == cluster.one_slot_master():
            found[letter].append("{cw}")
    return {letter: " ".join(tags) for letter, tags in found.items() if tags}


def drain(
    ctx: Context,
    cluster: BenchCluster,
    system: System,
    layout: Layout,
    jobs: int,
    label: str,
    extra_env: dict[str, str] | None = None,
    timeout_s: float = 300.0,
) -> Drained:
    """Push `jobs` no-op jobs in `layout`, drain them with a swarm, and measure the backlog window."""
    ctx.redis.flush()
    cluster.flush()
    push_spread(layout, cluster.url(), "noop", jobs)
    named = letters(cluster)
    replicas = cluster.replicas()
    nodes = [*named.values(), *replicas]
    edges: list[Edge] = []

    def edge(group: WorkerGroup) -> Edge:
        sampled = cluster.sample(nodes)
        workers = cpu_seconds([p for child in group.children() for p in group.subtree(child)])
        return Edge(time.monotonic(), ctx.done(), sampled, workers)

    env = {**layout.env(cluster.url()), "BENCH_TARGET": str(jobs), **(extra_env or {})}
    group = ctx.start(system, label, env)
    try:
        deadline = time.monotonic() + timeout_s
        seen, moved_at = -1, time.monotonic()
        while (now_done := ctx.done()) < jobs:
            group.ensure_alive()
            if now_done != seen:
                seen, moved_at = now_done, time.monotonic()
            if time.monotonic() > min(deadline, moved_at + STALL_S):
                raise TimeoutError(f"shards: {label}: {now_done} of {jobs} jobs done, then none for a while")
            if len(edges) < len(MARKS) and now_done >= MARKS[len(edges)] * jobs:
                edges.append(edge(group))
            time.sleep(POLL_S)
    finally:
        ctx.stop(group)
    if len(edges) < len(MARKS):
        raise RuntimeError(f"shards: {label}: the window passed between two polls")
    first, last = edges
    done = last.done - first.done
    if done <= 0:
        raise RuntimeError(f"shards: {label}: the window passed between two polls")
    cpu_us: dict[str, float] = {}
    commands: dict[str, float] = {}
    calls: dict[str, dict[str, int]] = {}
    for letter, port in named.items():
        before, after = first.nodes[port], last.nodes[port]
        cpu_us[letter] = (after.cpu_s - before.cpu_s) * 1e6 / done
        delta = {k: n - before.calls.get(k, 0) for k, n in after.calls.items()}
        calls[letter] = {k: n for k, n in sorted(delta.items()) if n}
        commands[letter] = sum(calls[letter].values()) / done
    replica_cpu = sum(last.nodes[p].cpu_s - first.nodes[p].cpu_s for p in replicas)
    return Drained(
        jobs=done,
        seconds=last.at - first.at,
        masters=named,
        cpu_us=cpu_us,
        commands=commands,
        calls=calls,
        replica_cpu_us=replica_cpu * 1e6 / done,
        worker_cpu_us=(last.workers_cpu_s - first.workers_cpu_s) * 1e6 / done,
        roles=roles(cluster, named),
    )
