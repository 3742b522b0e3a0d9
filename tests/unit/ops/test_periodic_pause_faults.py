"""Pause and resume (ops/periodic.py) when the reply of their one write is lost after it ran, or the
write never ran (the RESP proxy, tests/support/resp_proxy.py): the caller gets the error, and
sending the same again is safe, since SADD and SREM are idempotent ("already paused" / "was not
paused" after a write that did happen)."""

from __future__ import annotations

import json

import pytest
import redis

from cogworker.ops import periodic as periodic_ops
from cogworker.store import keys
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy

PAUSED = "cogworker:periodic:paused"


@pytest.fixture
def direct(private_redis: RedisServer) -> redis.Redis:
    client = private_redis.client()
    client.hset(keys.PERIODIC_ENTRIES, "hourly", json.dumps({"job": "j", "cron": "0 * * * *", "tz": "UTC"}))
    return client


@pytest.mark.parametrize("mode", ["lost", "dropped"])
def test_pause_and_resume_sent_again_after_a_fault(
    resp_proxy: RespProxy, direct: redis.Redis, mode: str
) -> None:
    arm = resp_proxy.lose_reply if mode == "lost" else resp_proxy.drop_command
    proxied = resp_proxy.client()

    rule = arm(command="SADD", arg=PAUSED)
    with pytest.raises(redis.ConnectionError):
        periodic_ops.pause(proxied, "hourly")
    assert rule.fired == 1
    assert direct.smembers(PAUSED) == ({"hourly"} if mode == "lost" else set())
    assert periodic_ops.pause(proxied, "hourly") is (mode == "dropped")  # the same again: no harm
    assert direct.smembers(PAUSED) == {"hourly"}

    rule = arm(command="SREM", arg=PAUSED)
    with pytest.raises(redis.ConnectionError):
        periodic_ops.resume(proxied, "hourly")
    assert rule.fired == 1
    assert direct.smembers(PAUSED) == (set() if mode == "lost" else {"hourly"})
    assert periodic_ops.resume(proxied, "hourly") is (mode == "dropped")
    assert direct.smembers(PAUSED) == set()
