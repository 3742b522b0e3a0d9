"""Immediate requeue, the fork server's Redis side: against a real Redis, including one that goes away."""

from __future__ import annotations

import pytest

from cogworker import codec
from cogworker.api import payload
from cogworker.settings import load_settings
from supervisor.forkserver.redis_requeue import RedisRequeue
from tests.support.redis_server import RedisServer


def strand(client, identity: str, tag: str) -> str:  # type: ignore[no-untyped-def]
    """A job left on a dead process's in-progress list."""
    job = payload.build("demo_jobs.record", (tag,), {}, queue="default", retry=True)
    client.lpush(f"cogworker:inprogress:{identity}", codec.dumps(job))
    client.sadd("cogworker:inprogress-identities", identity)
    return str(job["jid"])


def test_rescue_requeues_counting_orphanings_and_leaves_no_socket_open(private_redis: RedisServer) -> None:
    client = private_redis.client()
    rescue = RedisRequeue(load_settings(redis_url=private_redis.url))
    jid = strand(client, "h:1:dead", "a")

    result = rescue.requeue_dead_child("h:1:dead")

    assert result.moved == 1 and result.failed == 0
    assert client.llen("cogworker:queue:default") == 1
    assert client.get(f"cogworker:orphanings:{jid}") == "1"
    assert client.exists("cogworker:inprogress:h:1:dead") == 0
    # Its connection is closed after use: a worker forked next inherits no socket.
    assert all(c._sock is None for c in rescue._client.connection_pool._available_connections)  # type: ignore[union-attr]
    client.close()


def test_rescue_raises_while_redis_is_down_and_works_once_it_is_back(private_redis: RedisServer) -> None:
    rescue = RedisRequeue(load_settings(redis_url=private_redis.url))
    private_redis.stop()
    with pytest.raises(Exception):  # noqa: B017 - whatever redis-py raises for a refused connection
        rescue.requeue_dead_child("h:2:dead")
    private_redis.start()
    client = private_redis.client()
    strand(client, "h:2:dead", "b")
    assert rescue.requeue_dead_child("h:2:dead").moved == 1
    client.close()
