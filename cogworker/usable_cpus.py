"""How many CPUs this process may use: the default COGWORKER_COUNT.

os.cpu_count() counts the host's CPUs. Under `taskset -c 0`, systemd's CPUAffinity=, a container's
cpuset or its CPU quota, the process may use far fewer, and a swarm that started one child per host CPU
(a 2-CPU pod on a 64-core node ran 64) would spend its memory on children that wait for a CPU. This is
the CPUs the process may run on (its affinity mask), lowered to the cgroup's CPU quota rounded up
(cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), and never below 1.

The affinity mask and the quota differ in kind, which is why `COGWORKER_CPU_AFFINITY=auto` compares
COUNT with the mask alone (supervisor/forkserver/cpu_affinity.py): a quota says how much CPU time the
cgroup gets, not on which CPUs, so a quota-limited swarm is left to the kernel's placement.

Read once per process, when settings_fields.py is imported; it reads a handful of small files.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")
# Where a v1 hierarchy holding the `cpu` controller is usually mounted under the cgroup root.
_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cpus(root: Path = CGROUP_ROOT, membership: Path = SELF_CGROUP) -> int:
    """The CPUs the calling process may run on, at most its cgroup's CPU quota (rounded up), at least 1."""
    cpus = affinity_cpus()
    quota = quota_cpus(root, _read(membership) or "")
    if quota is not None:
        cpus = min(cpus, quota)
    return max(cpus, 1)


def affinity_cpus() -> int:
    """How many CPUs the calling process may be scheduled on (the host's count where there is no mask)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def quota_cpus(root: Path, membership: str) -> int | None:
    """The tightest CPU quota between the process's cgroup and the root, in CPUs rounded up (1.5 CPUs of
    time keep 2 processes busy part of the time each); None when no level sets one.

    `root` is the cgroup file system's mount point and `membership` the text of /proc/self/cgroup
    (`0::/path` for the v2 hierarchy, `N:cpu,cpuacct:/path` for a v1 one). A quota set on an
    ancestor limits every cgroup below it, so every level up to the root is read.
    """
    found: list[int] = []
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path.startswith("/"):
            continue
        if number == "0" and controllers == "":
            found += _v2_quotas(root, path)
        elif "cpu" in controllers.split(","):
            found += _v1_quotas(root, path)
    return min(found) if found else None


def _v2_quotas(root: Path, path: str) -> list[int]:
    quotas: list[int] = []
    for level in _levels(root, path):
        text = _read(level / "cpu.max")
        if text is None:
            continue
        quota, _, period = text.strip().partition(" ")
        cpus = _cpus(quota, period or "100000")
        if cpus is not None:
            quotas.append(cpus)
    return quotas


def _v1_quotas(root: Path, path: str) -> list[int]:
    quotas: list[int] = []
    for mount in (root / name for name in _V1_CPU_MOUNTS):
        if not mount.is_dir():
            continue
        for level in _levels(mount, path):
            quota, period = _read(level / "cpu.cfs_quota_us"), _read(level / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                cpus = _cpus(quota.strip(), period.strip())
                if cpus is not None:
                    quotas.append(cpus)
        break  # "cpu" and "cpu,cpuacct" are often one hierarchy mounted twice
    return quotas


def _levels(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder and each one above it, up to the mount point. A container without a cgroup
    namespace sees its host-side path in /proc/self/cgroup while its own cgroup is mounted at the
    mount point: when the path isn't there, the mount point is the process's cgroup."""
    start = mount.joinpath(*[part for part in path.split("/") if part])
    if not start.is_dir():
        start = mount
    levels = [start]
    while levels[-1] != mount and mount in levels[-1].parents:
        levels.append(levels[-1].parent)
    return levels


def _cpus(quota: str, period: str) -> int | None:
    """ceil(quota / period), or None for no quota (`max` in v2, -1 in v1) or a value that isn't one."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return max(math.ceil(quota_us / period_us), 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
