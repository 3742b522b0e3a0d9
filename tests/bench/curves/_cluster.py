"""The shards curve's private Redis Cluster: 3 masters + 3 replicas (tests/support/redis_cluster.py, the
test suite's own), each master's CPU and command counters read from its INFO, queue names picked by
the master their slot falls on, and a per-master CPU quota (a cgroup) for the capacity check.

The cluster is apart from the bench Redis: the jobs report to the bench Redis (jobkit's counter), so
nothing the harness reads or the jobs count lands on a master whose CPU is being measured.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # the bench runs with tests/bench first on sys.path, not the checkout
    sys.path.insert(0, str(ROOT))

from tests.support.redis_cluster import RedisCluster  # noqa: E402

ONE_SLOT_PREFIX = "{cw}:"  # the one-slot layout: every key under one hash tag
SHARDED_PREFIX = "cw:"  # the sharded layout tags each partition (and the home slot) itself
HOME_TAG = b"home"


@dataclass(frozen=True)
class NodeSample:
    cpu_s: float  # used_cpu_user + used_cpu_sys so far
    calls: dict[str, int]  # commandstats calls so far, INFO left out


def partition_slot(queue: str, index: int = 0) -> int:
    """The slot of partition `index` of `queue` in the sharded layout: its tag is `{<queue>#<index>}`."""
    return key_slot(f"{queue}#{index}".encode())


class BenchCluster:
    """A RedisCluster for one curve run; close() stops every node it started."""

    def __init__(self, node_timeout_ms: int = 3000) -> None:
        self.cluster = RedisCluster(node_timeout_ms=node_timeout_ms)
        self._clients: dict[int, redis.Redis] = {}
        self._dead: set[int] = set()

    def url(self) -> str:
        return self.cluster.url()

    def client(self, port: int) -> redis.Redis:
        if port not in self._clients:
            self._clients[port] = redis.Redis(
                host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2, socket_connect_timeout=1
            )
        return self._clients[port]

    def kill(self, port: int) -> None:
        """SIGKILL one node; it is asked nothing after (its replica, if it was a master, takes over)."""
        node = next(n for n in self.cluster.nodes if n.port == port)
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(timeout=10)
        self._dead.add(port)
        dropped = self._clients.pop(port, None)
        if dropped is not None:
            dropped.close()

    def slot_owners(self) -> list[tuple[int, int, int, list[int]]]:
        """(first slot, last slot, master port, replica ports) as the first node that answers sees it."""
        for node in self.cluster.nodes:
            if node.proc is None or node.proc.poll() is not None or node.port in self._dead:
                continue
            try:
                ranges: list[Any] = self.client(node.port).execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                continue
            return [(int(s), int(e), int(m[1]), [int(r[1]) for r in rest]) for s, e, m, *rest in ranges]
        raise RuntimeError("no node of the bench cluster answers CLUSTER SLOTS")

    def masters(self) -> list[int]:
        return sorted({master for _, _, master, _ in self.slot_owners()})

    def replicas(self) -> list[int]:
        return sorted({r for _, _, _, replicas in self.slot_owners() for r in replicas})

    def master_of(self, slot: int) -> int:
        return next(master for first, last, master, _ in self.slot_owners() if first <= slot <= last)

    def home_master(self) -> int:
        return self.master_of(key_slot(HOME_TAG))

    def one_slot_master(self) -> int:
        return self.master_of(key_slot(ONE_SLOT_PREFIX.encode()))

    def pid_of(self, port: int) -> int:
        node = next(n for n in self.cluster.nodes if n.port == port)
        assert node.proc is not None
        return node.proc.pid

    def sample(self, ports: Iterable[int]) -> dict[int, NodeSample]:
        found: dict[int, NodeSample] = {}
        for port in ports:
            client = self.client(port)
            cpu = client.info("cpu")
            stats = client.info("commandstats")
            calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
            calls.pop("info", None)
            found[port] = NodeSample(float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls)
        return found

    def flush(self) -> None:
        self.cluster.wait_ok()
        self.cluster.flush()

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        self.cluster.close()


def queues_on(cluster: BenchCluster, masters: list[int], per_master: int, stem: str = "q") -> list[str]:
    """`per_master` one-partition queue names whose slot is on each of `masters`, in turn: a spread
    picked so, not left to the hash (six names at random land 2/2/2 on three masters 1 time in 8)."""
    found: dict[int, list[str]] = {port: [] for port in masters}
    owners = cluster.slot_owners()
    index = 0
    while any(len(names) < per_master for names in found.values()):
        name = f"{stem}{index}"
        slot = partition_slot(name)
        port = next(m for first, last, m, _ in owners if first <= slot <= last)
        if port in found and len(found[port]) < per_master:
            found[port].append(name)
        index += 1
    # Round robin over the masters, so the list read in order alternates between them.
    return [found[port][turn] for turn in range(per_master) for port in masters]


def partitioned_queue(cluster: BenchCluster, partitions: int, stem: str = "hot") -> str:
    """A queue name whose `partitions` partitions spread as evenly as they can over the masters."""
    owners = cluster.slot_owners()
    masters = sorted({m for _, _, m, _ in owners})
    most = -(-partitions // len(masters))
    for index in range(10_000):
        name = f"{stem}{index}"
        counts = dict.fromkeys(masters, 0)
        for p in range(partitions):
            slot = partition_slot(name, p)
            counts[next(m for first, last, m, _ in owners if first <= slot <= last)] += 1
        if max(counts.values()) <= most:
            return name
    raise RuntimeError(f"no name spreads {partitions} partitions evenly")


class CpuQuota:
    """Each process added gets a cgroup of its own with the same CPU quota (cgroup v1's cpu controller,
    or v2's cpu.max): one master limited to `share` of a core, however many others run."""

    V1 = Path("/sys/fs/cgroup/cpu")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, share: float, period_us: int = 10_000) -> None:
        # The kernel's floor for a quota is 1 ms: a smaller share takes a longer period.
        self.period_us = max(period_us, round(1_000 / share))
        self.quota_us = max(1_000, round(share * self.period_us))
        self.share = self.quota_us / self.period_us
        self._made: list[tuple[Path, int]] = []

    @classmethod
    def available(cls) -> str | None:
        """None if a quota can be set here, else why not."""
        if os.geteuid() != 0:
            return "not root: no cgroup can be made"
        if (cls.V1 / "cpu.cfs_quota_us").exists() or "cpu" in _v2_controllers(cls.V2):
            return None
        return "no cgroup cpu controller (v1 /sys/fs/cgroup/cpu, or v2 cpu.max)"

    def add(self, pid: int) -> None:
        name = f"cogworker-bench-{os.getpid()}-{pid}"
        if (self.V1 / "cpu.cfs_quota_us").exists():
            group = self.V1 / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(self.period_us))
            (group / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        else:
            group = self.V2 / name
            group.mkdir()
            (group / "cpu.max").write_text(f"{self.quota_us} {self.period_us}")
        self._made.append((group, pid))
        (group / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        """Every process back in the root group, and the groups removed."""
        for group, pid in self._made:
            with contextlib.suppress(OSError):
                (group.parent / "cgroup.procs").write_text(str(pid))
            with contextlib.suppress(OSError):
                group.rmdir()
        self._made.clear()


def _v2_controllers(root: Path) -> list[str]:
    try:
        return (root / "cgroup.controllers").read_text().split()
    except OSError:
        return []
