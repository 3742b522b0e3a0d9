"""Simulated hosts for tests: one Linux network namespace each, joined to this one by a veth pair.

Each host gets a /30 of its own: the end in this (root) namespace holds `.1` (Redis binds there), the
end inside the namespace `.2`. A process started with `Host.command([...])` runs inside the namespace
and can reach nothing but its own `.1`, so taking the root-side end down cuts that host off Redis
(a partition) while every other host keeps running.

Names and addresses are unique per run -- two CI runs may share this machine: the namespace and veth
names carry this process's pid and a random byte, the /24 is picked at random among those no
interface here uses yet. Everything is torn down by `NetnsHosts.close()` (namespaces deleted, every
process inside SIGKILLed), and namespaces a crashed run left behind (their creator's pid is gone) are
swept at the next start. Needs root and `ip` (iproute2): `unavailable()` says why not, for a skip.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass

import psutil

# `cwh-<creator pid>-<random hex>-<index>`: the pid lets a later run sweep what a crashed one left.
NS_PREFIX = "cwh-"
IP_TIMEOUT_S = 20.0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=check)


def unavailable() -> str | None:
    """Why this machine can't run netns tests, or None when it can."""
    if shutil.which("ip") is None:
        return "needs `ip` (iproute2) to create network namespaces"
    if os.geteuid() != 0:
        return "needs root to create network namespaces and veth pairs (CI runs as root)"
    probe = f"{NS_PREFIX}{os.getpid()}-probe"
    added = _ip("netns", "add", probe, check=False)
    if added.returncode != 0:
        return f"`ip netns add` fails here: {added.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def sweep_stale() -> None:
    """Delete namespaces left by runs whose process is gone (a SIGKILLed pytest never tore down)."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    for line in listed:
        name = line.split(" ")[0]
        if not name.startswith(NS_PREFIX):
            continue
        owner = name[len(NS_PREFIX) :].split("-")[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            kill_namespace(name)


def kill_namespace(ns: str) -> None:
    for pid in namespace_pids(ns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # Deleting the namespace deletes the veth pair with it (its inner end lives there).
    _ip("netns", "del", ns, check=False)


def namespace_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _used_prefixes() -> set[str]:
    """The first three octets of every IPv4 address on this machine's interfaces."""
    used = set()
    for line in _ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.add(".".join(parts[parts.index("inet") + 1].split(".")[:3]))
    return used


@dataclass(frozen=True, slots=True)
class Host:
    index: int
    ns: str
    veth_root: str  # the end in the root namespace, holding redis_address
    veth_inner: str
    redis_address: str  # what processes on this host connect to (".1", in the root namespace)
    address: str  # the host's own address (".2", inside the namespace)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def partition(self) -> None:
        """Cut this host off: its link down, so nothing it sends reaches Redis and nothing comes back."""
        _ip("link", "set", self.veth_root, "down")

    def heal(self) -> None:
        _ip("link", "set", self.veth_root, "up")

    def pids(self) -> list[int]:
        return namespace_pids(self.ns)

    def kill_all(self) -> list[int]:
        """SIGKILL every process in the namespace at once (a host that loses power)."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids


class NetnsHosts:
    """`count` simulated hosts, created now; `close()` removes them whatever happened."""

    def __init__(self, count: int) -> None:
        sweep_stale()
        self.tag = f"{os.getpid()}-{random.randrange(256):02x}"
        self.hosts: list[Host] = []
        try:
            prefix = self._free_prefix()
            for index in range(count):
                self.hosts.append(self._create(index, prefix))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _free_prefix() -> str:
        used = _used_prefixes()
        rng = random.Random()
        for _ in range(200):
            candidate = f"10.{rng.randrange(200, 250)}.{rng.randrange(256)}"
            if candidate not in used:
                return candidate
        raise RuntimeError("no free 10.200-249.x.0/24 for the test hosts")

    def _create(self, index: int, prefix: str) -> Host:
        ns = f"{NS_PREFIX}{self.tag}-{index}"
        # At most 15 characters (IFNAMSIZ - 1): "cw" + pid (hex, <= 6) + 2 random hex + index + side.
        base = f"cw{os.getpid():x}{self.tag[-2:]}{index}"
        host = Host(
            index=index,
            ns=ns,
            veth_root=f"{base}r",
            veth_inner=f"{base}i",
            redis_address=f"{prefix}.{4 * index + 1}",
            address=f"{prefix}.{4 * index + 2}",
        )
        _ip("netns", "add", ns)
        # Appended before the link exists: a failure below still tears the namespace down.
        self.hosts.append(host)
        _ip("link", "add", host.veth_root, "type", "veth", "peer", "name", host.veth_inner)
        _ip("link", "set", host.veth_inner, "netns", ns)
        _ip("addr", "add", f"{host.redis_address}/30", "dev", host.veth_root)
        _ip("link", "set", host.veth_root, "up")
        _ip("-n", ns, "addr", "add", f"{host.address}/30", "dev", host.veth_inner)
        _ip("-n", ns, "link", "set", host.veth_inner, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        self.hosts.pop()
        return host

    @property
    def redis_addresses(self) -> tuple[str, ...]:
        return tuple(h.redis_address for h in self.hosts)

    def close(self) -> None:
        for host in self.hosts:
            kill_namespace(host.ns)
            # Normally gone with the namespace; left only if the move into it failed.
            _ip("link", "del", host.veth_root, check=False)
        self.hosts = []

    def __enter__(self) -> NetnsHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
