"""What a cogworker client tells Redis of itself (CLIENT SETINFO), and what that costs a new connection.

redis-py 7 reads its own version from the installed package's metadata (importlib.metadata walks
sys.path and parses a METADATA file) for every connection it makes, unless handed a DriverInfo: a
worker makes several on the way to its first job (issue 38). connect() hands it one per process,
holding the version redis-py would have read, so Redis sees the same name and version."""

from __future__ import annotations

from importlib import metadata

import pytest

from cogworker.settings import load_settings
from cogworker.store.connection import connect
from tests.support.redis_server import RedisServer


def test_every_connection_tells_redis_the_version_redis_py_would_read_itself(
    redis_server: RedisServer,
) -> None:
    pytest.importorskip("redis.driver_info")  # redis-py 7 and later
    settings = load_settings(redis_url=redis_server.url)
    first, second = connect(settings), connect(settings)
    try:
        infos = [c.connection_pool.connection_kwargs["driver_info"] for c in (first, second)]
        assert infos[0] is infos[1]  # built once per process, not per client or connection
        # What CLIENT SETINFO sends (Redis 7.2 and later keep it; older ones refuse it, ignored).
        assert (infos[0].name, infos[0].lib_version) == ("redis-py", metadata.version("redis"))
        assert first.ping() and second.ping()
    finally:
        first.close()
        second.close()
