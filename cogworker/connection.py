"""Redis clients built from settings. Every process builds its own after fork."""

from __future__ import annotations

import redis

from cogworker.settings import Settings

CONNECT_TIMEOUT_S = 2.0


def connect(settings: Settings, *, extra_timeout_s: float = 0.0) -> redis.Redis:
    """A client with a small pool. redis-py's own retries are off: callers decide what a failure means.
    A command may wait `redis_timeout_s` for Redis; a blocking one adds its block time (`extra_timeout_s`)."""
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_timeout=settings.redis_timeout_s + extra_timeout_s,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry_on_timeout=False,
        retry=None,
        health_check_interval=0,
        client_name=None,
    )


def is_unavailable(exc: BaseException) -> bool:
    """Redis could not be reached (as opposed to a command it refused)."""
    return isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError) or (
        isinstance(exc, redis.ResponseError)
        and str(exc).startswith(("LOADING", "MASTERDOWN", "READONLY", "BUSY", "TRYAGAIN"))
    )
