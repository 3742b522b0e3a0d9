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
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from cogworker.redis_sentinel import SentinelTarget

# What the sentinel connections take from the client's options (not decoding: redis-py parses
# sentinel replies itself, and the command packer is the master connections' concern).
_SENTINEL_OPTIONS = ("socket_timeout", "socket_connect_timeout", "retry", "health_check_interval")
_SSL_PREFIX = "ssl_"


class MajoritySentinel(Sentinel):
    """Believes a master only when most of the listed sentinels name it.

    redis-py takes the first sentinel whose answer looks healthy. Right after a failover a sentinel
    that hasn't heard of it yet still names the old master, and once that node is back (restarted,
    empty, as a master until the sentinels turn it into a replica: up to ~10 s) its answer looks
    healthy: a client believing it writes to a node about to be wiped. Asking every sentinel costs a
    few round trips per connect, which is rare."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        named: list[tuple[str, int]] = []
        errors: list[str] = []
        for sentinel in self.sentinels:
            try:
                masters: dict[str, Any] = sentinel.sentinel_masters()  # type: ignore[assignment]
                state = masters.get(service_name)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if state and self.check_master_state(state, service_name):  # type: ignore[no-untyped-call]
                named.append((str(state["ip"]), int(state["port"])))
        return majority(service_name, len(self.sentinels), named, errors)


def majority(
    service_name: str, sentinels: int, named: list[tuple[str, int]], errors: list[str]
) -> tuple[str, int]:
    """The master most of the `sentinels` named (each healthy answer in `named`), or
    MasterNotFoundError saying who named what and which sentinels failed to answer (`errors`). The
    async twin (store/async_connection.py) asks on redis.asyncio and counts here."""
    votes: dict[tuple[str, int], int] = {}
    for address in named:
        votes[address] = votes.get(address, 0) + 1
    for address, n in votes.items():
        if n > sentinels // 2:
            return address
    seen = ", ".join(f"{host}:{port} ({n})" for (host, port), n in votes.items()) or "none"
    raise MasterNotFoundError(
        f"No master found for {service_name!r} by a majority of {sentinels} sentinels "
        f"(named: {seen}){': ' + '; '.join(errors) if errors else ''}"
    )


def client(target: SentinelTarget, sentinel_password: str, **options: Any) -> redis.Redis:
    """A client of `target`'s master, with redis-py's client `options` (timeouts, decoding, TLS)."""
    kwargs = sentinel_options(target, sentinel_password, options)
    sentinel = MajoritySentinel(list(target.sentinels), sentinel_kwargs=kwargs)  # type: ignore[no-untyped-call, unused-ignore]
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


def sentinel_options(
    target: SentinelTarget, sentinel_password: str, options: dict[str, Any]
) -> dict[str, Any]:
    """What the sentinels themselves are asked with: the client's timeouts and TLS files, TLS when the
    URL says so, and the sentinels' own password (the sync client and the awaitable one,
    store/async_connection.py, share it)."""
    sentinel_kwargs = {
        k: v for k, v in options.items() if k in _SENTINEL_OPTIONS or k.startswith(_SSL_PREFIX)
    }
    if target.tls:
        sentinel_kwargs["ssl"] = True
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    return sentinel_kwargs
