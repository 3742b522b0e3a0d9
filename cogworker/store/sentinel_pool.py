"""A Redis client for the master a set of sentinels names (redis.sentinel.SentinelConnectionPool).

Every connection of the pool asks the sentinels for the current master when it connects, so after a
failover a connection that failed (the old master died, or answered READONLY as a demoted replica)
reconnects to the new master by itself on its next command. That holds for the fetch loop's own
DirectConnection too: it is made by this pool (`make_connection`), so it is sentinel-managed.

Until the sentinels have promoted a replica they report the old master as down, and connecting raises
MasterNotFoundError, a ConnectionError: callers see an outage like any other (connection.is_unavailable)
and log it once per component (outage.py).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from cogworker.redis_sentinel import SentinelTarget

# What the sentinel connections take from the client's options (not decoding: redis-py parses
# sentinel replies itself, and the command packer is the master connections' concern).
_SENTINEL_OPTIONS = ("socket_timeout", "socket_connect_timeout", "retry", "health_check_interval")
_SSL_PREFIX = "ssl_"


def client(target: SentinelTarget, sentinel_password: str, **options: Any) -> redis.Redis:
    """A client of `target`'s master, with redis-py's client `options` (timeouts, decoding, TLS)."""
    sentinel_kwargs = {
        k: v for k, v in options.items() if k in _SENTINEL_OPTIONS or k.startswith(_SSL_PREFIX)
    }
    if target.tls:
        sentinel_kwargs["ssl"] = True
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
        target.master,
        sentinel,
        ssl=target.tls,
        username=target.username,
        password=target.password,
        db=target.db,
        **options,
    )
    built = redis.Redis(connection_pool=pool)
    built.auto_close_connection_pool = True
    return built
