"""The fetch loop's own connection (cogworker/store/direct_connection.py): a socket the server closed
while it sat idle (Redis restarted) is replaced before the next command, not failed on it, so an
outage that already ended isn't reported again much later."""

from __future__ import annotations

from cogworker.settings import load_settings
from cogworker.store.connection import connect
from cogworker.store.direct_connection import DirectConnection
from tests.support.redis_server import RedisServer


def test_an_idle_socket_the_server_closed_is_replaced_before_the_next_command(
    private_redis: RedisServer,
) -> None:
    direct = DirectConnection(connect(load_settings(redis_url=private_redis.url)))
    assert direct.call("PING") == "PONG"
    private_redis.restart()
    assert direct.call("PING") == "PONG"
    assert direct.call_many(("SET", "k", "v"), ("GET", "k")) == ["OK", "v"]
    direct.close()
