"""A private Redis Cluster for tests: 3 masters + 3 replicas from Debian's redis-server on free loopback
ports (client and cluster-bus ports both picked free, so two runs on one machine don't collide), made
with `redis-cli --cluster create`, waited for until every node says cluster_state:ok; always torn down.

It can also move the owner of a slot while cogworker runs: a manual failover of the master (CLUSTER
FAILOVER on its replica) and a migration of the slot to another master (SETSLOT + MIGRATE, as
`redis-cli --cluster reshard` does it).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.tls_redis import make_ca, make_cert

MASTERS = 3
# The tests' deployment: a hash-tagged key prefix, so every key is in SLOT.
PREFIX = "{cw}:"
SLOT = key_slot(b"{cw}")


class RedisCluster:
    """With `tls=True` each node also listens with TLS on its own port (a client certificate required
    there), and the cluster bus and replication run over TLS; the plain ports stay for the tests' own
    admin reads. A TLS client asking CLUSTER SLOTS is told the TLS ports."""

    def __init__(self, node_timeout_ms: int = 3000, *, tls: bool = False) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli not found: run `make install` (it installs Redis) or install Redis")
        self.nodes: list[RedisServer] = []
        self.tls_ports: list[int] = []
        self.certs = Path(tempfile.mkdtemp(prefix="cogworker-cluster-tls-")) if tls else None
        tls_args: tuple[str, ...] = ()
        if self.certs is not None:
            make_ca(self.certs, "ca")
            make_cert(self.certs, "server", "ca", server=True)
            make_cert(self.certs, "client", "ca", server=False)
            # A node dials the others' bus (and its master) as a TLS client: the client certificate.
            tls_args = (
                *("--tls-cluster", "yes", "--tls-replication", "yes", "--tls-auth-clients", "yes"),
                *("--tls-cert-file", str(self.certs / "server.crt")),
                *("--tls-key-file", str(self.certs / "server.key")),
                *("--tls-client-cert-file", str(self.certs / "client.crt")),
                *("--tls-client-key-file", str(self.certs / "client.key")),
                *("--tls-ca-cert-file", str(self.certs / "ca.crt")),
            )
        try:
            for _ in range(MASTERS * 2):
                tls_port = () if self.certs is None else ("--tls-port", str(free_port()))
                self.nodes.append(
                    RedisServer(
                        extra=(
                            *tls_args,
                            *tls_port,
                            *("--cluster-enabled", "yes", "--cluster-port", str(free_port())),
                            *("--cluster-config-file", "nodes.conf"),
                            *("--cluster-node-timeout", str(node_timeout_ms)),
                            # A replica syncs at once (the default waits 5 s for others to join), and
                            # its offset moves within a second: CLUSTER SLOTS lists a replica only once
                            # its offset is past 0, which an idle master's 10 s ping period delays.
                            *("--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"),
                        )
                    )
                )
            self.tls_ports = [int(n.extra[n.extra.index("--tls-port") + 1]) for n in self.nodes if self.certs]
            # With TLS the cluster is made over TLS: the nodes then tell each other their TLS ports.
            addresses = [f"127.0.0.1:{p}" for p in (self.tls_ports or self.ports)]
            subprocess.run(
                [
                    cli,
                    *self.cli_tls(),
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.wait_ok()
        except BaseException:
            self.close()
            raise

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def cli_tls(self) -> list[str]:
        if self.certs is None:
            return []
        files = {"--cacert": "ca.crt", "--cert": "client.crt", "--key": "client.key"}
        return ["--tls", *(part for flag, name in files.items() for part in (flag, str(self.certs / name)))]

    def url(self) -> str:
        """A cluster URL naming two seed nodes (any one answering is enough); TLS ports with TLS."""
        if self.tls_ports:
            return f"rediss+cluster://127.0.0.1:{self.tls_ports[0]},127.0.0.1:{self.tls_ports[1]}"
        return f"redis+cluster://127.0.0.1:{self.ports[0]},127.0.0.1:{self.ports[1]}"

    def env(self, **extra: str) -> dict[str, str]:
        """COGWORKER_* settings for a process of the tests' deployment on this cluster."""
        values = {
            "COGWORKER_REDIS_URL": self.url(),
            "COGWORKER_KEY_PREFIX": PREFIX,
            "COGWORKER_REQUIRE": "cluster_jobs",
            "COGWORKER_LOG_FORMAT": "json",
        }
        if self.certs is not None:
            values["COGWORKER_REDIS_SSL_CA_FILE"] = str(self.certs / "ca.crt")
            values["COGWORKER_REDIS_SSL_CERT_FILE"] = str(self.certs / "client.crt")
            values["COGWORKER_REDIS_SSL_KEY_FILE"] = str(self.certs / "client.key")
        return {**values, **extra}

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def cluster_client(self) -> redis.RedisCluster:
        """redis-py's own cluster client, for the tests' reads of what cogworker wrote."""
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0], decode_responses=True)

    def wait_ok(self, timeout: float = 30) -> None:
        def all_ok() -> bool:
            for port in self.ports:
                client = self.client(port)
                try:
                    if client.cluster("info")["cluster_state"] != "ok":
                        return False
                    # Every node agrees every slot is served, each by a master with a replica (the
                    # create's config has spread), and a replica's copy is in sync (failover needs it).
                    ranges = _slot_ranges(client)
                    if sum(e - s + 1 for s, e, *_ in ranges) != 16384 or any(len(r) < 4 for r in ranges):
                        return False
                    info = client.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
                except redis.RedisError:
                    return False
                finally:
                    client.close()
            return True

        wait_until(all_ok, timeout=timeout, interval=0.1, message="cluster_state:ok on every node")

    def owner(self, slot: int) -> tuple[int, list[int]]:
        """(master port, replica ports) serving `slot`, as the first live node sees it."""
        for port in self.ports:
            client = self.client(port)
            try:
                for start, end, master, *replicas in _slot_ranges(client):
                    if start <= slot <= end:
                        return int(master[1]), [int(r[1]) for r in replicas]
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise RuntimeError(f"no node knows who serves slot {slot}")

    def failover(self, slot: int, timeout: float = 30) -> tuple[int, int]:
        """Promote the replica of `slot`'s master (CLUSTER FAILOVER, coordinated: no write lost).
        Returns (old master port, new master port) once the replica says it is master."""
        old, replicas = self.owner(slot)
        new = replicas[0]
        replica = self.client(new)
        try:
            replica.execute_command("CLUSTER", "FAILOVER")
            wait_until(
                lambda: replica.execute_command("ROLE")[0] == "master",
                timeout=timeout,
                interval=0.05,
                message=f"replica {new} promoted",
            )
        finally:
            replica.close()
        wait_until(
            lambda: self.owner(slot)[0] == new, timeout=timeout, interval=0.05, message="new owner seen"
        )
        return old, new

    def migrate(self, slot: int, timeout: float = 30) -> tuple[int, int]:
        """Move `slot` to another master while clients write to it, as `redis-cli --cluster reshard`
        does: IMPORTING/MIGRATING, MIGRATE the keys in batches, then SETSLOT NODE everywhere."""
        source_port, _ = self.owner(slot)
        masters = self._masters()
        target_port = next(p for p in masters if p != source_port)
        source, target = self.client(source_port), self.client(target_port)
        try:
            source_id, target_id = source.cluster("myid"), target.cluster("myid")
            target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                source.execute_command(
                    "MIGRATE", "127.0.0.1", target_port, "", 0, 10_000, "REPLACE", "KEYS", *keys
                )
            for port in (
                target_port,
                source_port,
                *(p for p in masters if p not in (source_port, target_port)),
            ):
                node = self.client(port)
                try:
                    node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
                finally:
                    node.close()
        finally:
            source.close()
            target.close()
        wait_until(
            lambda: self.owner(slot)[0] == target_port, timeout=timeout, interval=0.05, message="slot moved"
        )
        return source_port, target_port

    def _masters(self) -> list[int]:
        client = self.client(self.ports[0])
        try:
            return sorted({int(master[1]) for _, _, master, *_ in _slot_ranges(client)})
        finally:
            client.close()

    def add_user(self, name: str, password: str, commands: str) -> None:
        """An ACL user limited to the deployment's keys and channels, on every node (a cluster doesn't
        share its ACLs); its log is cleared."""
        allowed = [f"+{command}" for command in commands.split()]
        for port in self.ports:
            client = self.client(port)
            try:
                client.execute_command(
                    *("ACL", "SETUSER", name, "reset", "on", f">{password}"),
                    *(f"~{PREFIX}*", f"&{PREFIX}*", "-@all", *allowed),
                )
                client.execute_command("ACL", "LOG", "RESET")
            finally:
                client.close()

    def refused(self, name: str) -> list[str]:
        """What any node's ACL refused user `name` (ACL LOG), a failed login aside."""
        found = []
        for port in self.ports:
            client = self.client(port)
            try:
                entries = client.acl_log()
            finally:
                client.close()
            found += [
                f"{port} {e['reason']}:{e['object']} ({e['context']})"
                for e in entries
                if e["username"] == name and e["reason"] != "auth"
            ]
        return found

    def flush(self) -> None:
        for port in self._masters():
            client = self.client(port)
            try:
                client.flushall()
            finally:
                client.close()

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []
        if self.certs is not None:
            shutil.rmtree(self.certs, ignore_errors=True)


def _slot_ranges(client: redis.Redis) -> list[Any]:
    reply: list[Any] = client.execute_command("CLUSTER SLOTS")
    return reply
