"""The plugin's private Redis (cogworker/private_redis.py) when its free port is taken before
redis-server binds it: it tries another port, and after a few taken ones fails with the server's log.
The "taken" port is the one the session's Redis listens on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from cogworker import private_redis
from tests.support.redis_server import RedisServer, free_port


def ports(*first: int) -> Iterator[int]:
    yield from first
    while True:
        yield free_port()


def test_a_taken_port_is_given_up_for_another(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = ports(redis_server.port)
    monkeypatch.setattr(private_redis, "free_port", lambda: next(offered))
    with contextlib.closing(private_redis.PrivateRedis()) as server:
        assert server.port != redis_server.port
        with contextlib.closing(server.client()) as conn, contextlib.closing(redis_server.client()) as other:
            conn.set("mine", "1")
            assert (conn.get("mine"), other.get("mine")) == ("1", None)
    assert server.proc is None


def test_after_a_few_taken_ports_it_fails_with_the_server_s_log(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(private_redis, "free_port", lambda: redis_server.port)
    with pytest.raises(RuntimeError, match=r"(?s)did not start after 3 attempts:.*Address already in use"):
        private_redis.PrivateRedis()
