"""A private Sentinel deployment for tests: a master, a replica, three sentinels (Debian's
`redis-sentinel`), every one on a free loopback port, with passwords, always torn down.

The master and replica have `requirepass` (and `masterauth`, so either can replicate from the other
after a failover); the sentinels have their own password (`requirepass`, and `sentinel sentinel-pass`
to talk to each other). Failure detection is shortened (down-after 1 s), so a killed master is
replaced in about 2 to 3 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import redis

from tests.support.redis_server import free_port, wait_until

MASTER_NAME = "cogmaster"
# Distinctive, so the log/title/output grep can't miss them or match anything else; both hold
# characters that must be %-encoded in a URL.
MASTER_PASSWORD = "Sntl-master/pw#4K"
SENTINEL_PASSWORD = "Sntl-sentinel-pw@9Z"
# Short, so a failover takes ~2 s; not shorter: on a loaded machine a 500 ms stall once had the new
# master marked down too, and the sentinels failed back to the old node, restarted empty.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 2000


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(
            f"{name} not found: run `make install` (deploy/ensure-redis-server.sh installs it)"
        )
    return path


class SentinelRedis:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-sentinel-"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._clients: dict[int, redis.Redis] = {}
        self.master_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        try:
            self._start_redis(self.master_port)
            self._start_redis(self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port))
            wait_until(self._replica_synced, timeout=20, message="the replica's first sync")
            for port in self.sentinel_ports:
                self._start_sentinel(port)
            try:
                wait_until(self._sentinels_ready, timeout=30, message="three sentinels that see the replica")
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}: {self._states()}\n{self.log_text()[-4000:]}") from None
        except BaseException:
            self.close()
            raise

    # Addresses ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The redis+sentinel:// URL of the deployment (the master's password in it, %-encoded)."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://:{quote(MASTER_PASSWORD, safe='')}@{hosts}/{MASTER_NAME}/0"

    @property
    def sentinels_setting(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)

    def env(self) -> dict[str, str]:
        """COGWORKER_* variables for the URL form."""
        return {"COGWORKER_REDIS_URL": self.url, "COGWORKER_REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD}

    def node(self, port: int) -> redis.Redis:
        """A client of the Redis on `port` (kept: its pool reconnects after a restart)."""
        return self._client(port, MASTER_PASSWORD)

    def sentinel(self, port: int) -> redis.Redis:
        return self._client(port, SENTINEL_PASSWORD)

    def _client(self, port: int, password: str) -> redis.Redis:
        if port not in self._clients:
            self._clients[port] = redis.Redis(
                host="127.0.0.1", port=port, password=password, decode_responses=True, socket_timeout=5
            )
        return self._clients[port]

    def master_port_now(self) -> int | None:
        """The master's port as a majority of the sentinels answer it (None: no majority answers)."""
        votes: dict[int, int] = {}
        for port in self.sentinel_ports:
            try:
                address = self.sentinel(port).sentinel_get_master_addr_by_name(MASTER_NAME)
            except redis.RedisError:
                continue
            if address:
                votes[int(address[1])] = votes.get(int(address[1]), 0) + 1
        winners = [port for port, n in votes.items() if n >= 2]
        return winners[0] if winners else None

    # Faults -----------------------------------------------------------------------------------------
    def kill_master(self) -> int:
        """SIGKILL the current master; returns its port."""
        port = self.master_port_now()
        assert port is not None, "no master to kill"
        proc = self.procs[port]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return port

    def restart(self, port: int, replica_of: int) -> None:
        """Start the node on `port` again, empty, as a replica of the master on `replica_of` (as a
        deployment restarts a failed node: never as an empty master the others could resync from)."""
        assert self.procs[port].poll() is not None, "the node is still running"
        self._start_redis(port, "--replicaof", "127.0.0.1", str(replica_of))

    def wait_promoted(self, old_port: int, timeout: float = 30.0) -> float:
        """Wait until the sentinels name a new master that says it is one; returns when (epoch s)."""

        def promoted() -> bool:
            port = self.master_port_now()
            if port is None or port == old_port:
                return False
            try:
                return self.node(port).info("replication").get("role") == "master"
            except redis.RedisError:
                return False

        wait_until(promoted, timeout=timeout, interval=0.05, message="a replica promoted by the sentinels")
        return time.time()

    def replicas_of_master(self) -> int:
        port = self.master_port_now()
        if port is None:
            return 0
        try:
            return int(self.node(port).info("replication").get("connected_slaves", 0))
        except redis.RedisError:
            return 0

    # Processes --------------------------------------------------------------------------------------
    def _spawn(self, port: int, argv: list[str]) -> None:
        log = open(self.dir / f"{port}.log", "ab")  # noqa: SIM115
        self.procs[port] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def _start_redis(self, port: int, *extra: str) -> None:
        workdir = self.dir / str(port)
        workdir.mkdir(exist_ok=True)
        self._spawn(
            port,
            [
                _binary("redis-server"),
                *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
                *("--dir", str(workdir), "--daemonize", "no"),
                *("--requirepass", MASTER_PASSWORD, "--masterauth", MASTER_PASSWORD),
                *extra,
            ],
        )
        wait_until(lambda: self._answers(self.node(port)), timeout=10, message=f"redis-server on {port}")

    def _start_sentinel(self, port: int) -> None:
        config = self.dir / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
            f"requirepass {SENTINEL_PASSWORD}\n"
            f"sentinel sentinel-pass {SENTINEL_PASSWORD}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
            f"sentinel auth-pass {MASTER_NAME} {MASTER_PASSWORD}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        self._spawn(port, [_binary("redis-sentinel"), str(config)])
        wait_until(lambda: self._answers(self.sentinel(port)), timeout=10, message=f"sentinel on {port}")

    @staticmethod
    def _answers(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def _replica_synced(self) -> bool:
        info = self.node(self.replica_port).info("replication")
        return info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            try:
                state = self.sentinel(port).sentinel_master(MASTER_NAME)
            except redis.RedisError:
                return False
            if int(state.get("num-slaves", 0)) < 1 or int(state.get("num-other-sentinels", 0)) < 2:
                return False
        return True

    def _states(self) -> list[object]:
        found: list[object] = []
        for port in self.sentinel_ports:
            try:
                state = self.sentinel(port).sentinel_master(MASTER_NAME)
                found.append({k: state.get(k) for k in ("num-slaves", "num-other-sentinels", "flags")})
            except redis.RedisError as exc:
                found.append(repr(exc))
        return found

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("*.log")))

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
