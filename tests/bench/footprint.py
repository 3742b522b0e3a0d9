"""What a running set of workers costs while nothing happens: CPU, and Redis commands (memory: procs)."""

from __future__ import annotations

import time
from typing import Any

from context import Context
from procs import WorkerGroup, cpu_seconds
from redis_server import delta


def idle_cost(ctx: Context, group: WorkerGroup) -> dict[str, Any]:
    """CPU of the parent (with its helper processes) and of the workers, and Redis commands/s, over
    an idle window."""
    assert group.parent is not None
    children = group.children()
    parent_side = [group.parent, *group.helpers()]
    seconds = ctx.plan.idle_s
    stats_before = ctx.redis.commandstats()
    parent_before, children_before = cpu_seconds(parent_side), cpu_seconds(children)
    began = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - began
    parent_cpu = cpu_seconds(parent_side) - parent_before
    children_cpu = cpu_seconds(children) - children_before
    calls = delta(stats_before, ctx.redis.commandstats())
    per_s = sum(calls.values()) / wall
    return {
        "seconds": wall,
        "parent_cpu_pct": 100 * parent_cpu / wall,
        "children_cpu_pct": 100 * children_cpu / wall,
        "redis_commands_per_s": per_s,
        "redis_commands_per_s_per_child": per_s / len(children) if children else None,
        "commands": calls,
    }
