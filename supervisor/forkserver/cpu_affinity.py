"""COGWORKER_CPU_AFFINITY=spread: slot N's worker runs on the Nth CPU the swarm may use
(cogworker/settings_fields.py says why and what it costs).

Applied in the worker just after the fork, while it has one thread: a thread inherits the mask of the
thread that starts it, so every thread the worker starts later (job threads, fetcher, event loop)
stays on that CPU, and sched_setaffinity with pid 0 sets the calling thread alone. The CPUs are the
ones the fork server may use, inherited from the supervisor (systemd's CPUAffinity=, a container's
cpuset, taskset), so a worker is never moved outside what the operator allowed. A replacement for a
slot gets the slot's CPU again.
"""

from __future__ import annotations

import os


def cpu_for_slot(slot: int, allowed: set[int]) -> int:
    """The slot's CPU: the allowed CPUs in order, wrapping round when there are more slots."""
    ordered = sorted(allowed)
    return ordered[slot % len(ordered)]


def pin_worker(mode: str, slot: int) -> int | None:
    """Pin the calling process (one thread, just forked) for `mode`; the CPU, or None when not pinned.
    Raises OSError when the kernel refuses (the caller logs it and runs unpinned)."""
    if mode != "spread":
        return None
    cpu = cpu_for_slot(slot, os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu
