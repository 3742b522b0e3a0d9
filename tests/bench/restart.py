"""A rolling restart under a steady trickle of jobs: how long each worker slot takes no jobs.

Jobs of no length (W3's sleeper job with 0 s, which records its start, its pid and its end) are pushed
every PUSH_GAP_S while the worker command is told to restart its workers (cogworker-swarm and dramatiq:
SIGHUP). A slot is a worker process and its replacement: the old processes are paired with the new
ones in order (the first to stop with the first to start), and the slot's unavailable time is from the
old process's last job start to its replacement's first. The system as a whole may still take jobs on
its other slots meanwhile: `max_pickup_gap_s` is the longest time no process started a job at all.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

from context import Context
from procs import wait_for
from recovery import Events
from systems.base import System

PUSH_GAP_S = 0.005
BASELINE_S = 1.0
CAP_S = 90.0


def rolling_restart(ctx: Context, system: System) -> dict[str, Any]:
    signal_number = system.rolling_restart_signal
    assert signal_number is not None
    ctx.redis.flush()
    group = ctx.start(system, "restart")
    try:
        ctx.wait_ready(system, group)
        old = {child.pid for child in group.children()}
        index = 0

        def push_for(seconds: float) -> None:
            nonlocal index
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                system.push_sleeper(index, 0.0)
                index += 1
                time.sleep(PUSH_GAP_S)

        push_for(BASELINE_S)
        assert group.parent is not None
        signalled_at = time.time()
        os.kill(group.parent.pid, signal_number)

        def replaced() -> bool:
            push_for(0.1)
            children = {child.pid for child in group.children()}
            if children & old or len(children) < len(old):
                return False
            started = {pid for starts in Events.read(ctx).starts.values() for pid, _ in starts}
            return children <= started

        wait_for(replaced, CAP_S, "every worker replaced and running jobs", group)
        push_for(BASELINE_S)
        wait_for(lambda: len(Events.read(ctx).ends) >= index, 30, "the last jobs", group)
        return _summary(Events.read(ctx), old, signalled_at, index)
    finally:
        ctx.stop(group)


def _summary(events: Events, old: set[int], signalled_at: float, jobs: int) -> dict[str, Any]:
    starts = sorted((at, pid) for runs in events.starts.values() for pid, at in runs)
    last_of_old = sorted(max(at for at, pid in starts if pid == old_pid) for old_pid in old)
    new_pids = {pid for _, pid in starts if pid not in old}
    first_of_new = sorted(min(at for at, pid in starts if pid == new_pid) for new_pid in new_pids)
    gaps = [new - last for last, new in zip(last_of_old, first_of_new, strict=False)]
    during = [at for at, _ in starts if at >= signalled_at]
    pickup_gaps = [b - a for a, b in itertools.pairwise(during)]
    return {
        "jobs": jobs,
        "ran": len(events.ends),
        "lost": jobs - len(events.ends),
        "slot_unavailable_s": gaps,
        "max_slot_unavailable_s": max(gaps) if gaps else None,
        "max_pickup_gap_s": max(pickup_gaps) if pickup_gaps else None,
        "restart_took_s": (first_of_new[-1] - signalled_at) if first_of_new else None,
    }
