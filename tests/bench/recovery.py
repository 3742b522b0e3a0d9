"""W3: a worker process is SIGKILLed mid-job. Which of its jobs come back, and how soon?

The victim is the direct child of the worker command whose subtree runs a job at that moment; it is
killed together with its own descendants (rq's work horse runs the job one level further down, and
an OOM kill of an rq worker leaves the horse only while it finishes, so both go). Nothing is assumed
about recovery: the harness waits up to a cap after the kill and reports what it saw.

If the worker command exits because one of its children died (dramatiq's parent does), the harness
starts it again once, as systemd's Restart=on-failure would in production, and says so.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import jobkit
import psutil
from context import Context
from procs import WorkerGroup, kill_tree, wait_for
from systems.base import System


@dataclass
class Events:
    """What the sleep jobs reported: per job index, (pid, time) of each start and each end."""

    starts: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls, ctx: Context) -> Events:
        events = cls()
        for raw in ctx.client.lrange(jobkit.EVENTS, 0, -1):
            kind, index, pid, at = raw.decode().split()
            target = events.starts if kind == "start" else events.ends
            target[int(index)].append((int(pid), float(at)))
        return events

    def running_pids(self) -> set[int]:
        """Pids running a job now: a start with no end from the same pid after it."""
        running = set()
        for index, starts in self.starts.items():
            pid, at = starts[-1]
            if not any(end_pid == pid and end_at >= at for end_pid, end_at in self.ends.get(index, [])):
                running.add(pid)
        return running


def pick_victim(group: WorkerGroup, events: Events) -> list[psutil.Process]:
    """The worker child (and its descendants) running the most jobs right now."""
    running = events.running_pids()
    best: list[psutil.Process] = []
    best_count = 0
    for child in group.children():
        tree = group.subtree(child)
        count = sum(1 for proc in tree if proc.pid in running)
        if count > best_count:
            best, best_count = tree, count
    if not best:
        raise RuntimeError("no worker child was running a job when it was time to kill one")
    return best


def recovery(ctx: Context, system: System) -> dict[str, Any]:
    ctx.redis.flush()
    group = ctx.start(system, "w3")
    groups = [group]
    try:
        ctx.wait_ready(system, group)
        return _kill_and_watch(ctx, system, groups)
    finally:
        for each in groups:
            ctx.stop(each)


def _kill_and_watch(ctx: Context, system: System, groups: list[WorkerGroup]) -> dict[str, Any]:
    plan = ctx.plan
    for index in range(plan.w3_jobs):
        system.push_sleeper(index, plan.w3_job_s)
    wait_for(lambda: bool(Events.read(ctx).starts), 30, "a sleep job to start", groups[0])
    time.sleep(plan.w3_job_s * 0.4)  # well inside the job, not at its edges
    victims = pick_victim(groups[0], Events.read(ctx))
    victim_pids = {proc.pid for proc in victims}
    killed_at = time.time()
    kill_tree(victims)
    parent: dict[str, Any] = {"survived": True}
    deadline = killed_at + plan.w3_cap_s
    while time.time() < deadline:
        events = Events.read(ctx)
        if len(events.ends) >= plan.w3_jobs:
            break
        code = groups[-1].exit_code()
        if code is not None and len(groups) == 1:
            parent = {"survived": False, "exit_code": code, "exit_after_s": time.time() - killed_at}
            groups.append(ctx.start(system, "w3-restarted"))
        time.sleep(0.1)
    return _summary(ctx, Events.read(ctx), victim_pids, killed_at, parent)


def _summary(
    ctx: Context, events: Events, victim_pids: set[int], killed_at: float, parent: dict[str, Any]
) -> dict[str, Any]:
    plan = ctx.plan
    killed = sorted(
        index
        for index, starts in events.starts.items()
        if any(pid in victim_pids and at < killed_at for pid, at in starts)
        and not any(pid in victim_pids for pid, _ in events.ends.get(index, []))
    )
    restart_s: dict[int, float | None] = {}
    for index in killed:
        later = [at for _, at in events.starts[index] if at > killed_at]
        restart_s[index] = min(later) - killed_at if later else None
    lost = [index for index in range(plan.w3_jobs) if not events.ends.get(index)]
    waited = [s for s in restart_s.values() if s is not None]
    last_end = max((at for ends in events.ends.values() for _, at in ends), default=killed_at)
    return {
        "jobs": plan.w3_jobs,
        "job_s": plan.w3_job_s,
        "cap_s": plan.w3_cap_s,
        "killed_pids": sorted(victim_pids),
        "killed_jobs": killed,
        "restart_after_s": {str(k): v for k, v in restart_s.items()},
        "max_restart_s": max(waited) if waited and len(waited) == len(killed) else None,
        "not_restarted": sum(1 for s in restart_s.values() if s is None),
        "lost": len(lost),
        "lost_jobs": lost,
        "ran_twice": sum(1 for ends in events.ends.values() if len(ends) > 1),
        "last_end_after_kill_s": last_end - killed_at,
        "parent": parent,
    }
