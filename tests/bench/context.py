"""What every workload shares: the sizes of this run, the bench Redis, and starting workers in it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import jobkit
import redis
from procs import RUN_ID_VAR, WorkerGroup, wait_for
from redis_server import RedisServer
from systems.base import WORKER_PROCESSES, System

BENCH_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Plan:
    """How big each workload is. `--quick` is a smoke run: every step runs once, small."""

    quick: bool
    # Every process in the harness's session (procs.placement), not each command in its own.
    one_session: bool = False
    w1_jobs: int = 20_000
    w1_runs: int = 3
    w1_timeout_s: float = 300.0
    single_pushes: int = 5_000
    bulk_pushes: int = 10_000
    w2_jobs: int = 200
    w2_gap_s: float = 0.05
    w3_jobs: int = 20
    w3_job_s: float = 3.0
    w3_cap_s: float = 60.0
    idle_s: float = 10.0
    # Idle time before W2 and the idle window: long enough for every system's fetchers to reach
    # their idle pace (cogworker backs off to 1 s), which is the state W2 means to measure.
    settle_s: float = 3.0
    ready_timeout_s: float = 60.0
    # W4: async jobs of 5 ms (or one Redis round trip), 2 x 500 at once (w4.py).
    w4_jobs: int = 20_000
    w4_runs: int = 3
    w4_timeout_s: float = 300.0
    stop_timeout_s: float = 45.0

    @classmethod
    def make(cls, quick: bool, one_session: bool = False) -> Plan:
        if not quick:
            return cls(quick=False, one_session=one_session)
        return cls(
            quick=True,
            one_session=one_session,
            w1_jobs=2_000,
            w1_runs=1,
            w1_timeout_s=120.0,
            single_pushes=500,
            bulk_pushes=2_000,
            w2_jobs=40,
            w3_jobs=8,
            w3_job_s=2.0,
            w3_cap_s=30.0,
            idle_s=4.0,
            settle_s=2.0,
            w4_jobs=4_000,
            w4_runs=1,
        )


@dataclass
class Context:
    redis: RedisServer
    plan: Plan
    run_id: str
    log_dir: Path
    groups: list[WorkerGroup] = field(default_factory=list)

    def env_for(self, system: System, extra: dict[str, str] | None) -> dict[str, str]:
        # A COGWORKER_* left in the caller's shell must not change what is measured.
        env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
        path = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH", "")) if p)
        env.update(PYTHONPATH=path, BENCH_REDIS_URL=self.redis.url, **{RUN_ID_VAR: self.run_id})
        env.update(system.worker_env())
        env.update(extra or {})
        return env

    def start(
        self,
        system: System,
        label: str,
        extra_env: dict[str, str] | None = None,
        argv: list[str] | None = None,
    ) -> WorkerGroup:
        log = self.log_dir / f"{system.name}-{label}.log"
        group = WorkerGroup(
            argv or system.worker_argv(), self.env_for(system, extra_env), log, self.plan.one_session
        )
        self.groups.append(group)
        group.start()
        return group

    def stop(self, group: WorkerGroup) -> float:
        return group.stop(self.plan.stop_timeout_s)

    def kill_all(self) -> None:
        for group in self.groups:
            group.kill()

    def reset_bench_keys(self) -> None:
        """Clears what the jobs report, and nothing of a running system's own state."""
        client = self.client
        client.delete(jobkit.DONE, jobkit.T_FIRST, jobkit.T_LAST, jobkit.LATENCY, jobkit.EVENTS)

    @property
    def client(self) -> redis.Redis:
        assert self.redis.client is not None
        return self.redis.client

    def done(self) -> int:
        return int(self.client.get(jobkit.DONE) or 0)

    def wait_ready(self, system: System, group: WorkerGroup) -> float:
        """Seconds until a pushed job has run and every worker process exists."""
        began = time.monotonic()
        system.push_noop()
        wait_for(lambda: self.done() >= 1, self.plan.ready_timeout_s, "a first job to run", group)
        wait_for(
            lambda: len(group.children()) >= WORKER_PROCESSES,
            self.plan.ready_timeout_s,
            f"{WORKER_PROCESSES} worker processes",
            group,
        )
        self.reset_bench_keys()
        return time.monotonic() - began
