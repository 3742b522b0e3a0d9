"""Redis Cluster for `redis.asyncio`: a pool pinned to the master owning the deployment's slot.

The async twin of cluster_pool.py, which says why one slot (and so one master) is all cogworker
needs, and what each cluster reply means. Where the master is, is asked by the same `SlotOwner`:
its discovery opens blocking sockets, so it runs on a thread (`asyncio.to_thread`), never on the
loop; its answer is kept, so that happens only when a connection opens and no owner is known.

MOVED, ASK, TRYAGAIN and CLUSTERDOWN mean the node did not run the command: the connection raises
SlotUnavailable (a ConnectionError the push's outcome check reads as "maybe never sent", and finds
not written) and is closed, so the next command reconnects to the owner then known. A connection
opened before the owner changed is closed when it is next taken from the pool.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.connection import Connection, ConnectionPool, SSLConnection
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from cogworker.cluster_url import Seeds
from cogworker.store.cluster_pool import SlotOwner, SlotUnavailable, pool_options, slot_of


class PinnedConnection(Connection):
    """A connection to whichever master owns the pool's slot when it connects."""

    def __init__(self, *, slot_owner: SlotOwner, **kwargs: Any) -> None:
        self.slot_owner = slot_owner
        # The owner's change count when this connection opened: another means it may be stale.
        self.generation = -1
        super().__init__(**kwargs)

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self.is_connected:
            return
        generation = self.slot_owner.changes
        self.host, self.port = await asyncio.to_thread(self.slot_owner.address)
        try:
            await super().connect_check_health(
                check_health=check_health, retry_socket_connect=retry_socket_connect
            )
        except (redis.ConnectionError, redis.TimeoutError):
            # The owner we knew is gone (killed, or partitioned): ask the cluster again next time.
            self.slot_owner.forget((self.host, self.port))
            raise
        self.generation = generation

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except MovedError as exc:
            self.slot_owner.moved(exc.host or self.host, exc.port)
            raise await self._unavailable(exc) from None
        except ClusterDownError as exc:
            self.slot_owner.forget((self.host, self.port))
            raise await self._unavailable(exc) from None
        except (AskError, TryAgainError) as exc:
            raise await self._unavailable(exc) from None

    async def _unavailable(self, exc: redis.ResponseError) -> SlotUnavailable:
        # Other replies of a pipeline may be unread: never reuse this socket.
        await self.disconnect()
        word = getattr(exc, "status_code", None) or type(exc).__name__
        return SlotUnavailable(f"{word} for slot {self.slot_owner.slot} from {self.host}:{self.port}: retry")


class PinnedSSLConnection(PinnedConnection, SSLConnection):
    pass


class PinnedPool(ConnectionPool):
    """A ConnectionPool whose connections go to the owner of one slot."""

    def __init__(self, slot_owner: SlotOwner, **kwargs: Any) -> None:
        self.slot_owner = slot_owner
        super().__init__(slot_owner=slot_owner, **kwargs)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        conn = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        if (
            isinstance(conn, PinnedConnection)
            and conn.is_connected
            and conn.generation != self.slot_owner.changes
        ):
            # Opened to an owner since replaced: reconnect now rather than fail one command with MOVED.
            await conn.disconnect()
            await conn.connect()  # type: ignore[no-untyped-call]
        return conn


def cluster_client(seeds: Seeds, prefix: str, **options: Any) -> aredis.Redis:
    """A redis.asyncio.Redis whose every connection goes to the master owning `prefix`'s slot;
    `options` as cluster_pool.cluster_client takes them."""
    kwargs, discovery = pool_options(seeds, options)
    owner = SlotOwner(seeds, slot_of(prefix), discovery)
    connection_class = PinnedSSLConnection if seeds.tls else PinnedConnection
    pool = PinnedPool(owner, connection_class=connection_class, **kwargs)
    return aredis.Redis.from_pool(pool)
