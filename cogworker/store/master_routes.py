"""Which master serves which slot, and a plain client per master: what lets a fan-out over the sharded
layout's partitions (store/fanout.py) send one pipeline per **master** rather than one per slot.

A deployment with 30 queues of 4 partitions has 120 partition slots on, say, 3 masters; a page that sums
over them would otherwise cost 120 round trips per read. A master runs a command on any key of any slot
it serves, so the commands of all its partitions go in one pipeline on a connection to it.

That connection is a plain one to the master's address (not pinned to a slot, store/cluster_pool.py):
a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply means the master did not run that command (the slot moved,
is moving, or the cluster is down), and comes back in place of the reply. The fan-out then forgets the
slot map (read again with CLUSTER SLOTS on next use) and sends those partitions' commands again through
their slots' own pinned clients, which follow the move as every worker's do. So a redirect never runs a
command twice, and a reply is never taken from a master that no longer serves the slot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from cogworker.store.cluster_pool import PinnedPool

# Replies meaning "not run here": sent again through the slot's pinned client.
REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)


@dataclass(frozen=True, slots=True)
class Master:
    """A master of the cluster as CLUSTER SLOTS describes it."""

    address: str  # host:port
    node_id: str
    ranges: tuple[tuple[int, int], ...]  # slot ranges it serves, inclusive
    replicas: tuple[str, ...]  # host:port of each replica CLUSTER SLOTS lists (failed ones are not)

    @property
    def slots(self) -> int:
        return sum(end - start + 1 for start, end in self.ranges)

    def serves(self, slot: int) -> bool:
        return any(start <= slot <= end for start, end in self.ranges)


def _address(entry: list[Any], asked: str) -> str:
    """CLUSTER SLOTS names a node [ip, port, id, ...]; an empty or '?' ip means the node asked."""
    host = entry[0] if entry[0] not in ("", "?", None) else asked
    return f"{host}:{entry[1]}"


def masters(client: redis.Redis) -> list[Master]:
    """Every master serving slots, from the node `client` is connected to (CLUSTER SLOTS), by address."""
    reply: list[Any] = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
    pool = client.connection_pool
    if isinstance(pool, PinnedPool):
        asked = pool.slot_owner.address()[0]
    else:
        asked = str(pool.connection_kwargs.get("host") or "127.0.0.1")
    found: dict[str, tuple[str, list[tuple[int, int]], list[str]]] = {}
    for start, end, master, *replicas in reply:
        address = _address(master, asked)
        node_id = str(master[2]) if len(master) > 2 else address
        entry = found.setdefault(address, (node_id, [], []))
        entry[1].append((int(start), int(end)))
        entry[2].extend(a for a in (_address(r, asked) for r in replicas) if a not in entry[2])
    return [
        Master(address, node_id, tuple(sorted(ranges)), tuple(replicas))
        for address, (node_id, ranges, replicas) in sorted(found.items())
    ]


class MasterRoutes:
    """The slot map of the cluster `home` is pinned into, kept until `forget`, and a plain client per
    master address with `home`'s options and pool size; thread-safe."""

    def __init__(self, home: redis.Redis) -> None:
        self._home = home
        self._lock = threading.Lock()
        self._owners: list[tuple[int, int, str]] | None = None  # (start, end, address)
        self._clients: dict[str, redis.Redis] = {}

    @property
    def usable(self) -> bool:
        """Only a client pinned into a cluster has masters to route to."""
        return isinstance(self._home.connection_pool, PinnedPool)

    def owner(self, slot: int) -> str | None:
        owners = self._owners
        if owners is None:
            found = [(start, end, m.address) for m in masters(self._home) for start, end in m.ranges]
            with self._lock:
                self._owners = owners = found
        return next((address for start, end, address in owners if start <= slot <= end), None)

    def forget(self) -> None:
        """A reply said the map is stale: read CLUSTER SLOTS again on next use."""
        with self._lock:
            self._owners = None

    def client(self, address: str) -> redis.Redis:
        with self._lock:
            found = self._clients.get(address)
            if found is None:
                found = self._clients[address] = self._plain(address)
            return found

    def _plain(self, address: str) -> redis.Redis:
        pool = self._home.connection_pool
        assert isinstance(pool, PinnedPool)
        host, _, port = address.rpartition(":")
        kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in ("slot_owner", "host", "port")}
        tls = issubclass(pool.connection_class, redis.SSLConnection)
        plain = redis.ConnectionPool(
            connection_class=redis.SSLConnection if tls else redis.Connection,
            host=host,
            port=int(port),
            max_connections=pool.max_connections,
            **kwargs,
        )
        return redis.Redis(connection_pool=plain)
