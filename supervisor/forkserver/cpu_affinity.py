"""COGWORKER_CPU_AFFINITY: slot N's worker runs on the Nth CPU the swarm may use, always (`spread`) or
when the swarm has one worker per CPU (`auto`, the default; cogworker/settings_fields.py says why and
what it costs, and pin_probe.py how `auto` lets go of a worker that uses more than one CPU).

Applied in the worker just after the fork, while it has one thread: a thread inherits the mask of the
thread that starts it, so every thread the worker starts later (job threads, fetcher, event loop)
stays on that CPU, and sched_setaffinity with pid 0 sets the calling thread alone. The CPUs are the
ones the fork server may use, inherited from the supervisor (systemd's CPUAffinity=, a container's
cpuset, taskset), so a worker is never moved outside what the operator allowed. A replacement for a
slot gets the slot's CPU again.

The default COUNT (cogworker/usable_cpus.py) is the same set of CPUs lowered to the cgroup's CPU
quota, so `auto` pins a swarm at its default count unless a quota holds it to fewer CPUs than it may
run on; a quota is CPU time, not a set of CPUs to pin to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Pinning:
    cpu: int
    allowed: frozenset[int]  # what the worker may use unpinned: the fork server's CPUs


def cpu_for_slot(slot: int, allowed: set[int] | frozenset[int]) -> int:
    """The slot's CPU: the allowed CPUs in order, wrapping round when there are more slots."""
    ordered = sorted(allowed)
    return ordered[slot % len(ordered)]


def pin_worker(mode: str, slot: int, count: int) -> Pinning | None:
    """Pin the calling process (one thread, just forked) for `mode` in a swarm of `count` workers;
    None when not pinned. Raises OSError when the kernel refuses (the caller logs it and runs
    unpinned)."""
    if mode == "none" or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(0))
    # `auto` pins only a swarm that has a worker for every CPU: with fewer, pinned workers of two
    # swarms on one host would share the first CPUs and leave the rest idle; with more, two workers
    # would share a CPU that the kernel could not balance.
    if mode == "auto" and count != len(allowed):
        return None
    cpu = cpu_for_slot(slot, allowed)
    os.sched_setaffinity(0, {cpu})
    return Pinning(cpu, allowed)
