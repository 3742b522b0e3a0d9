"""The default COGWORKER_COUNT (cogworker/usable_cpus.py): the CPUs the process may run on, lowered to
its cgroup's CPU quota rounded up. The quota is read from cgroup trees each test writes, laid out as the
kernel's are (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker.usable_cpus import affinity_cpus, quota_cpus, usable_cpus

V2_SELF = "0::/kubepods/pod1/container\n"
V1_SELF = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("cpu_max", "cpus"),
    [("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000\n", 1), ("400000 200000", 2)],
)
def test_a_v2_quota_counts_its_cpus_rounded_up(tmp_path: Path, cpu_max: str, cpus: int) -> None:
    write(tmp_path, "kubepods/pod1/container/cpu.max", cpu_max)
    assert quota_cpus(tmp_path, V2_SELF) == cpus


def test_no_v2_quota_is_none(tmp_path: Path) -> None:
    write(tmp_path, "kubepods/pod1/container/cpu.max", "max 100000\n")
    assert quota_cpus(tmp_path, V2_SELF) is None
    assert quota_cpus(tmp_path, "0::/nowhere\n") is None
    assert quota_cpus(tmp_path, "") is None


def test_the_tightest_quota_on_the_way_to_the_root_counts(tmp_path: Path) -> None:
    # A pod's quota limits its containers, whatever theirs says.
    write(tmp_path, "kubepods/pod1/cpu.max", "300000 100000\n")
    write(tmp_path, "kubepods/pod1/container/cpu.max", "max 100000\n")
    assert quota_cpus(tmp_path, V2_SELF) == 3
    write(tmp_path, "kubepods/cpu.max", "100000 100000\n")
    assert quota_cpus(tmp_path, V2_SELF) == 1


def test_a_container_with_its_own_cgroup_namespace_reads_the_mount_point(tmp_path: Path) -> None:
    write(tmp_path, "cpu.max", "200000 100000\n")
    assert quota_cpus(tmp_path, "0::/\n") == 2


def test_a_v1_quota_is_read_from_the_cpu_hierarchy(tmp_path: Path) -> None:
    write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n")
    write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    write(tmp_path, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(tmp_path, "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    assert quota_cpus(tmp_path, V1_SELF) == 3
    write(tmp_path, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n")
    assert quota_cpus(tmp_path, V1_SELF) is None


def test_a_v1_container_seeing_its_host_path_reads_its_mount_point(tmp_path: Path) -> None:
    # Without a cgroup namespace the path is the host's, and the container's own cgroup is the mount.
    write(tmp_path, "cpu/cpu.cfs_quota_us", "100000\n")
    write(tmp_path, "cpu/cpu.cfs_period_us", "100000\n")
    assert quota_cpus(tmp_path, "3:cpu:/docker/abc\n") == 1


@pytest.mark.parametrize("cpu_max", ["", "lots 100000", "200000 0", "-5 100000", "200000 x"])
def test_an_unreadable_quota_is_no_quota(tmp_path: Path, cpu_max: str) -> None:
    write(tmp_path, "kubepods/pod1/container/cpu.max", cpu_max)
    assert quota_cpus(tmp_path, V2_SELF) is None


def test_the_count_is_the_affinity_lowered_to_the_quota_and_at_least_one(tmp_path: Path) -> None:
    membership = tmp_path / "self-cgroup"
    membership.write_text(V2_SELF)
    root = tmp_path / "cgroup"
    assert usable_cpus(root, membership) == affinity_cpus() == len(os.sched_getaffinity(0))
    write(root, "kubepods/pod1/container/cpu.max", "100000 100000\n")
    assert usable_cpus(root, membership) == 1
    write(root, "kubepods/pod1/container/cpu.max", f"{1000 * 100000} 100000\n")
    assert usable_cpus(root, membership) == affinity_cpus()
    assert usable_cpus(root, tmp_path / "missing") == affinity_cpus()


def test_the_default_count_is_the_cpus_the_process_may_run_on() -> None:
    # A fresh interpreter on one CPU: the default is read when the settings are imported.
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = "from cogworker.settings import Settings; print(Settings().count)"
    env = {k: v for k, v in os.environ.items() if k != "COGWORKER_COUNT"}
    done = subprocess.run(
        ["taskset", "-c", str(cpu), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
