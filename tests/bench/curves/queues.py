"""Number of queues: W1's drain with the jobs spread evenly over 1, 10, 100 and 1,000 queues, every one
of them read by every worker, weighted and strict.

cogworker reads them through COGWORKER_QUEUES ("q0000:1,q0001:2,..." weighted, "q0000,q0001,..." strict);
Sidekiq + YJIT through one `-q` per queue ("q0000,1" weighted, "q0000" strict: Sidekiq orders strictly
when no weight is given). The weights cycle 1, 2, 3, so a weighted order is a real shuffle. Each point
is one drain of W1's job count (throughput.drain_once: the same window, CPU and command counts), and
the systems and modes take turns round by round.

Dramatiq is left out: its worker starts one consumer thread per queue in every process (1,000 queues
are 2,000 threads, each polling Redis), and it has no order between queues, weighted or strict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import systems
from context import Context
from curve import Curve, Metric, Target
from systems.base import System
from throughput import drain_once

TITLE = "Number of queues: W1 spread over 1 to 1,000 queues, weighted and strict"

SIZES = (1, 10, 100, 1_000)
QUICK_SIZES = (1, 1_000)
PEERS = {"cogworker": "cogworker", "sidekiq-yjit": "Sidekiq + YJIT"}
MODES = ("weighted", "strict")


def names(count: int) -> list[str]:
    return [f"q{i:04d}" for i in range(count)]


def weight(index: int) -> int:
    return index % 3 + 1


class Spread:
    """A system whose W1 backlog is spread over `count` queues, its workers reading all of them."""

    def __init__(self, system: System, count: int, strict: bool) -> None:
        self._system = system
        self._names = names(count)
        self._strict = strict

    def __getattr__(self, name: str) -> Any:
        return getattr(self._system, name)

    def push_noop_bulk(self, count: int) -> None:
        share, extra = divmod(count, len(self._names))
        for index, queue in enumerate(self._names):
            jobs = share + (1 if index < extra else 0)
            if jobs:
                self._system.push_noop_to(queue, jobs)  # type: ignore[attr-defined]

    def worker_env(self) -> dict[str, str]:
        env = self._system.worker_env()
        if self._system.name == "cogworker":
            spec = self._names if self._strict else [f"{q}:{weight(i)}" for i, q in enumerate(self._names)]
            env["COGWORKER_QUEUES"] = ",".join(spec)
        return env

    def worker_argv(self) -> list[str]:
        if self._system.name == "cogworker":
            return self._system.worker_argv()
        spec = self._names if self._strict else [f"{q},{weight(i)}" for i, q in enumerate(self._names)]
        return self._system.worker_argv(queues=tuple(spec))  # type: ignore[call-arg]


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    sizes = QUICK_SIZES if ctx.plan.quick else SIZES
    jobs = ctx.plan.w1_jobs
    curve = Curve(
        name="queues",
        title="Number of queues",
        x_label=f"queues read by every worker ({jobs:,} no-op jobs spread evenly over them)",
        x_log=True,
        metrics=[
            Metric("jobs_per_s", "throughput", "jobs/s", "↑"),
            Metric("worker_cpu_us", "worker CPU per job", "µs", "↓"),
            Metric("redis_cpu_us", "Redis CPU per job", "µs", "↓"),
            Metric("commands", "Redis commands per job", "", "↓"),
        ],
    )
    loaded: dict[str, System] = {}
    try:
        for name in PEERS:
            try:
                loaded[name] = systems.load(name, ctx.redis.url)
            except Exception as exc:
                curve.notes.append(f"{PEERS[name]} not measured: {exc}")
        for index in range(ctx.plan.w1_runs):
            for count in sizes:
                for name, system in loaded.items():
                    for mode in MODES if count > 1 else MODES[:1]:
                        series = PEERS[name] + ("" if mode == "weighted" else " strict")
                        say(f"queues: round {index + 1}, {series}, {count} queues ...")
                        spread = cast(System, Spread(system, count, mode == "strict"))
                        try:
                            figures = drain_once(ctx, spread, jobs)
                        finally:
                            ctx.kill_all()
                        point = {
                            "jobs_per_s": figures["jobs_per_s"],
                            "worker_cpu_us": figures["backlog_workers_cpu_us_per_job"],
                            "redis_cpu_us": figures["redis_cpu_us_per_job"],
                            "commands": figures["commands_per_job"],
                        }
                        curve.add(series, count, **point)
                        if count == 1:  # one queue has no order: the strict line starts at it too
                            curve.add(PEERS[name] + " strict", count, **point)
    finally:
        for system in loaded.values():
            system.close()
    judge(curve, max(sizes))
    curve.notes.append(
        "Dramatiq not measured: its worker runs a consumer thread per queue in every process "
        "(1,000 queues: 2,000 threads polling Redis) and has no weighted or strict order between queues."
    )
    curve.notes.append(
        "Weights cycle 1, 2, 3 over the queues (cogworker `qNNNN:w`, Sidekiq `-q qNNNN,w`); strict lists "
        "them in order (Sidekiq: `-q qNNNN` without weights)."
    )
    return [curve]


def judge(curve: Curve, most: int) -> None:
    for series in ("cogworker", "cogworker strict"):
        one = curve.value(series, 1, "jobs_per_s")
        many = curve.value(series, most, "jobs_per_s")
        met = None if one is None or many is None else many >= 0.8 * one
        detail = (
            "a point is missing"
            if one is None or many is None
            else f"{many:,.0f} jobs/s with {most:,} queues, {many / one:.0%} of {one:,.0f} with one"
        )
        curve.targets.append(
            Target(f"{series}: with {most:,} queues, throughput ≥ 80 % of one queue", met, detail)
        )
