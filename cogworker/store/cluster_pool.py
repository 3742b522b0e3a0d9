"""Redis Cluster as one Redis: a connection pool pinned to the master that owns the deployment's slot.

Cluster mode requires a hash-tagged COGWORKER_KEY_PREFIX (cluster_url.check_prefix), so every key of a
deployment is in one slot, owned by one master at a time. cogworker then needs no cluster client: every
multi-key script, the LMOVE/BLMOVE between a queue and an in-progress list and every MULTI are legal
on that master, and the code built on `redis.Redis` (pipelines, pub/sub, the fetch loop's
DirectConnection made by `connection_pool.make_connection()`) works unchanged. It is the shape of
redis-py's SentinelConnectionPool: each connection asks the pool where the master is when it connects.

Where the master is, is asked of the seed nodes (and every node seen since) with CLUSTER SLOTS, and
kept until something says it moved:
- a MOVED reply (a failover or a slot migration finished): the owner it names is taken;
- CLUSTERDOWN, or a connect that fails: the owner is forgotten and asked for again;
- ASK and TRYAGAIN (the slot is being migrated): the command was not run; retried later.

Each of those replies means Redis did not run the command, so the connection raises SlotUnavailable, a
ConnectionError: every caller already treats that as "Redis unavailable, try again" (is_unavailable),
never as a refusal, and nothing is filed or dropped because of it. The connection is closed (a MULTI
that got MOVED has unread replies; the next command reconnects to the new owner).

One slot means one master does all the work: a cluster gives a deployment failover, not more capacity
(docs/deployment/scaling.md).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import redis
from redis.connection import parse_url
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from cogworker.cluster_url import Seeds, hash_tag

# Connecting to a seed to ask it where the slot lives; short, as each seed is tried in turn.
DISCOVERY_TIMEOUT_S = 2.0


class SlotUnavailable(redis.ConnectionError):
    """The node did not run the command: the slot moved, is moving, or the cluster is down."""


class SlotOwner:
    """Which master owns `slot`, found from the seed nodes and kept until a reply says otherwise.
    Shared by every connection of one pool; thread-safe."""

    def __init__(self, seeds: Seeds, slot: int, discovery_options: dict[str, Any]) -> None:
        self.slot = slot
        self._given = seeds
        self._seeds = seeds.addresses
        self._options = discovery_options
        self._lock = threading.Lock()
        self._owner: tuple[str, int] | None = None
        # Every node CLUSTER SLOTS named: asked too, so the seeds going away doesn't lose the cluster.
        self._known: list[tuple[str, int]] = []
        self.changes = 0  # how often the owner changed (the tests read it)
        self._on_change: Callable[[], None] = lambda: None

    def sibling(self, slot: int) -> SlotOwner:
        """An owner finder for another slot of the same cluster: the same seeds and options, and the
        nodes already seen (a reader fanning out over the sharded layout's partitions, store/fanout.py)."""
        other = SlotOwner(self._given, slot, self._options)
        with self._lock:
            other._known = list(self._known)
        return other

    def on_change(self, callback: Callable[[], None]) -> None:
        """`callback()` after the owner changed (not under this object's lock)."""
        self._on_change = callback

    def address(self) -> tuple[str, int]:
        with self._lock:
            if self._owner is None:
                self._owner = self._discover()
            return self._owner

    def moved(self, host: str, port: int) -> None:
        with self._lock:
            changed = self._owner != (host, port)
            if changed:
                self._owner = (host, port)
                self.changes += 1
        if changed:
            self._on_change()

    def forget(self, address: tuple[str, int]) -> None:
        with self._lock:
            changed = self._owner == address
            if changed:
                self._owner = None
                self.changes += 1
        if changed:
            self._on_change()

    def _discover(self) -> tuple[str, int]:
        tried: list[tuple[str, int]] = []
        last: Exception | None = None
        for node in dict.fromkeys([*self._seeds, *self._known]):
            tried.append(node)
            try:
                slots = self._ask(node)
            except redis.RedisError as exc:
                last = exc  # that node is down, refuses us or isn't a cluster member: ask the next
                continue
            for start, end, master, *replicas in slots:
                found = [_node(master, node), *(_node(r, node) for r in replicas)]
                self._known.extend(a for a in found if a not in self._known)
                if start <= self.slot <= end:
                    return found[0]
            # A node that lost its view (restarted without its nodes.conf) may know no owner: ask on.
            last = SlotUnavailable(f"no master serves slot {self.slot} (asked {node[0]}:{node[1]})")
        # The last node's reason (a wrong password, a certificate refused, no owner): what an operator
        # needs. redis-py's messages name the host and port, never the credentials.
        if isinstance(last, SlotUnavailable):
            raise last
        raise SlotUnavailable(
            f"none of the {len(tried)} cluster nodes known answered CLUSTER SLOTS "
            f"(last: {type(last).__name__}: {last})"
        )

    def _ask(self, node: tuple[str, int]) -> list[Any]:
        conn_class = redis.SSLConnection if self._options.get("ssl") else redis.Connection
        options = {k: v for k, v in self._options.items() if k != "ssl"}
        conn = conn_class(host=node[0], port=node[1], **options)
        try:
            conn.send_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            reply: list[Any] = conn.read_response()
            return reply
        finally:
            conn.disconnect()  # type: ignore[no-untyped-call]


def _node(entry: list[Any], asked: tuple[str, int]) -> tuple[str, int]:
    """CLUSTER SLOTS names a node [ip, port, id, ...]; an empty or '?' ip means the one asked."""
    host = entry[0] if entry[0] not in ("", "?", None) else asked[0]
    return str(host), int(entry[1])


class PinnedConnection(redis.Connection):
    """A connection to whichever master owns the pool's slot when it connects."""

    def __init__(self, *, slot_owner: SlotOwner, **kwargs: Any) -> None:
        self.slot_owner = slot_owner
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self._sock:
            return
        self.host, self.port = self.slot_owner.address()
        try:
            super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)
        except (redis.ConnectionError, redis.TimeoutError):
            # The owner we knew is gone (killed, or partitioned): ask the cluster again next time.
            self.slot_owner.forget((self.host, self.port))
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except MovedError as exc:
            self.slot_owner.moved(exc.host or self.host, exc.port)
            raise self._unavailable(exc) from None
        except ClusterDownError as exc:
            self.slot_owner.forget((self.host, self.port))
            raise self._unavailable(exc) from None
        except (AskError, TryAgainError) as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: redis.ResponseError) -> SlotUnavailable:
        # Other replies of a pipeline or MULTI may be unread: never reuse this socket.
        self.disconnect()  # type: ignore[no-untyped-call]
        word = getattr(exc, "status_code", None) or type(exc).__name__
        return SlotUnavailable(f"{word} for slot {self.slot_owner.slot} from {self.host}:{self.port}: retry")


class PinnedSSLConnection(PinnedConnection, redis.SSLConnection):
    pass


class PinnedPool(redis.ConnectionPool):
    """A ConnectionPool whose connections go to the owner of one slot."""

    def __init__(self, slot_owner: SlotOwner, **kwargs: Any) -> None:
        self.slot_owner = slot_owner
        super().__init__(slot_owner=slot_owner, **kwargs)
        # When the owner changes, idle connections to the old one are closed (as redis-py's Sentinel
        # pool does), so they don't each fail one command with MOVED when next taken. Connections in
        # use (a pub/sub listener, the fetch loop's own) find out at their next command.
        pool = weakref.ref(self)
        slot_owner.on_change(lambda: _close_idle(pool()))


def _close_idle(pool: PinnedPool | None) -> None:
    if pool is not None:
        pool.disconnect(inuse_connections=False)


def sibling_client(client: redis.Redis, slot: int) -> redis.Redis | None:
    """A client like `client` (its options, its pool's size) pinned to `slot` instead; None when
    `client` isn't pinned to a cluster slot (a single Redis, or Sentinel)."""
    pool = client.connection_pool
    if not isinstance(pool, PinnedPool):
        return None
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "slot_owner"}
    sibling = PinnedPool(
        pool.slot_owner.sibling(slot),
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **kwargs,
    )
    return redis.Redis(connection_pool=sibling)


def slot_of(prefix: str) -> int:
    """The slot of every key starting with a hash-tagged `prefix`."""
    tag = hash_tag(prefix)
    if tag is None:
        raise ValueError(f"key prefix {prefix!r} has no hash tag")
    return int(key_slot(("{" + tag + "}").encode()))


def cluster_client(seeds: Seeds, prefix: str, **options: Any) -> redis.Redis:
    """A redis.Redis whose every connection goes to the master owning `prefix`'s slot. `options` are
    those connect() gives redis.Redis.from_url (timeouts, retries off, TLS files, decoding)."""
    kwargs, discovery = pool_options(seeds, options)
    owner = SlotOwner(seeds, slot_of(prefix), discovery)
    connection_class = PinnedSSLConnection if seeds.tls else PinnedConnection
    pool = PinnedPool(owner, connection_class=connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


def pool_options(seeds: Seeds, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pinned pool's connection options (`options` with the seed URL's query options winning, as
    from_url has it) and the short-timeout options slot discovery connects with; the sync client and
    the awaitable one (store/async_cluster.py) build theirs from these."""
    url_options = parse_url(seeds.urls[0])  # type: ignore[no-untyped-call]
    for name in ("host", "port", "path", "db", "connection_class"):
        url_options.pop(name, None)
    kwargs = {**options, **url_options}
    discovery = {
        k: v for k, v in kwargs.items() if k in ("username", "password") or k.startswith("ssl_") or k == "ssl"
    }
    discovery.update(
        socket_timeout=DISCOVERY_TIMEOUT_S, socket_connect_timeout=DISCOVERY_TIMEOUT_S, decode_responses=True
    )
    if seeds.tls:
        discovery["ssl"] = True
    return kwargs, discovery
