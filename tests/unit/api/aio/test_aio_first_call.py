"""An awaitable push as a new user's first call: a fresh interpreter configured only by COGWORKER_*
variables (tests/support/first_call.py), nothing configured in code, `cogworker.aio` reached through
the package's lazy names. The settings (and the key prefix) are read on that first push."""

from __future__ import annotations

import json

import redis

from cogworker.store import keys
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer

CODE = """
    import asyncio

    import cogworker
    import demo_jobs

    async def main():
        jid = await demo_jobs.record.aio.perform_async("first")
        bulk = await cogworker.aio.push_bulk(demo_jobs.record, [("a",), ("b",)])
        later = await demo_jobs.record.set(queue="later").aio.perform_in(60, "c")
        print(jid, *bulk, later)

    asyncio.run(main())
"""


def test_a_first_awaitable_push_from_the_environment_alone(redis_server: RedisServer, r: redis.Redis) -> None:
    jid, *bulk, later = first_call(CODE, redis_server.url).split()
    queued = [json.loads(raw)["jid"] for raw in r.lrange(keys.queue("default"), 0, -1)]
    assert sorted(queued) == sorted([jid, *bulk])
    assert [json.loads(raw)["jid"] for raw in r.zrange(keys.SCHEDULE, 0, -1)] == [later]


def test_a_first_awaitable_push_uses_the_configured_prefix(redis_server: RedisServer, r: redis.Redis) -> None:
    (jid, *_) = first_call(CODE, redis_server.url, COGWORKER_KEY_PREFIX="shop:").split()
    assert jid in [json.loads(raw)["jid"] for raw in r.lrange("shop:queue:default", 0, -1)]
    assert r.llen(keys.queue("default")) == 0
