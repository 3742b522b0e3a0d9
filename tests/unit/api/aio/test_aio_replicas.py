"""COGWORKER_REDIS_MIN_REPLICAS for awaitable pushes, against a real master with and without a real
replica: the WAIT rides in the push's round trip, a push returns once the replica has the job, and
NotReplicated names the jids it did write when no replica confirms them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import demo_jobs
import pytest
import redis

import cogworker
import cogworker.aio
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.redis_server import RedisServer, wait_until


@pytest.fixture
def master() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def replica(master: RedisServer) -> Iterator[RedisServer]:
    server = RedisServer(extra=("--replicaof", "127.0.0.1", str(master.port)))
    try:
        client = server.client()
        wait_until(lambda: client.info("replication").get("master_link_status") == "up", message="sync")
        client.close()
        yield server
    finally:
        server.close()


def use(server: RedisServer, min_replicas: int) -> redis.Redis:
    cw_client.configure(
        load_settings(redis_url=server.url, redis_min_replicas=min_replicas, redis_min_replicas_timeout_s=0.2)
    )
    return server.client()


def queued(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange("cogworker:queue:default", 0, -1)]


def test_awaitable_pushes_return_once_a_replica_has_them(master: RedisServer, replica: RedisServer) -> None:
    use(master, 1)

    async def push() -> tuple[str | None, str | None, list[str | None]]:
        jid = await demo_jobs.record.aio.perform_async("a")
        later = await demo_jobs.record.aio.perform_in(60, "b")
        bulk = await cogworker.aio.push_bulk(demo_jobs.record, [("c",), ("d",)])
        return jid, later, bulk

    jid, later, bulk = asyncio.run(push())
    on_replica = replica.client()
    # WAIT returned: the replica has them already, no polling needed.
    assert set(queued(on_replica)) == {jid, *bulk}
    assert on_replica.zcard("cogworker:schedule") == 1 and later
    on_replica.close()


def test_without_a_replica_an_awaitable_push_raises_naming_the_job_it_wrote(master: RedisServer) -> None:
    client = use(master, 1)
    with pytest.raises(cogworker.NotReplicated) as err:
        asyncio.run(demo_jobs.record.aio.perform_async("a"))
    assert err.value.confirmed == 0 and err.value.wanted == 1
    assert list(err.value.jids) == queued(client)  # written: it runs unless the master dies first


def test_the_wait_goes_in_the_push_round_trip(master: RedisServer, replica: RedisServer) -> None:
    """The script and the WAIT are sent together: MONITOR sees the WAIT right after the EVALSHA."""
    client = use(master, 1)
    asyncio.run(demo_jobs.record.aio.perform_async("warm"))  # loads the script
    with client.monitor() as monitor:
        asyncio.run(demo_jobs.record.aio.perform_async("watched"))
        seen: list[str] = []
        for event in monitor.listen():
            command = event["command"].split(" ", 1)[0].upper()
            if command in ("EVALSHA", "EVAL", "WAIT"):
                seen.append(command)
            if command == "WAIT":
                break
    assert seen == ["EVALSHA", "WAIT"]
