"""Awaitable pushes to every shape of deployment the sync client reaches (store/async_connection.py,
store/async_cluster.py), each real and configured only by COGWORKER_* variables: TLS with a client
certificate as an ACL user, Sentinel (a majority names the master), and a Redis Cluster, plain (where
the push follows the slot's owner through a failover) and TLS. A plain reader checks what was written."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import pytest
import redis

import cogworker
import cogworker.aio
from tests.support.daemon_env import use_only
from tests.support.redis_cluster import PREFIX, SLOT, RedisCluster
from tests.support.redis_server import wait_until
from tests.support.sentinel_redis import SentinelRedis
from tests.support.tls_redis import TlsRedis


@cogworker.job(name="aio.deployed", unique="until_executed")
def deployed(n: int) -> None: ...


async def push_three() -> list[str | None]:
    first = await deployed.aio.perform_async(1)
    duplicate = await deployed.aio.perform_async(1)  # its claim: a round trip of its own
    later = await deployed.aio.perform_in(60, 2)
    return [first, duplicate, later]


def jids(client: redis.Redis | redis.RedisCluster, prefix: str = "cogworker:") -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange(f"{prefix}queue:default", 0, -1)]


def test_an_awaitable_push_over_tls_as_an_acl_user(monkeypatch: pytest.MonkeyPatch) -> None:
    with contextlib.closing(TlsRedis()) as server:
        use_only(monkeypatch, server.env())
        first, duplicate, later = asyncio.run(push_three())
        admin = server.admin()
        try:
            assert jids(admin) == [first] and duplicate is None
            assert admin.zcard("cogworker:schedule") == 1 and later
        finally:
            admin.close()
        assert server.refused() == []  # the documented ACL commands are all an awaitable push uses


def test_an_awaitable_push_through_sentinel(monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = SentinelRedis()
    try:
        use_only(monkeypatch, deployment.env())
        first, duplicate, _ = asyncio.run(push_three())
        master = deployment.node(deployment.master_port_now() or 0)
        assert jids(master) == [first] and duplicate is None
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    with contextlib.closing(RedisCluster()) as cluster:
        yield cluster


def test_an_awaitable_push_follows_the_slot_owner_through_a_failover(
    redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_only(monkeypatch, redis_cluster.env())
    reader = redis_cluster.cluster_client()

    async def scenario() -> tuple[list[str | None], list[str | None]]:
        before = await push_three()
        redis_cluster.failover(SLOT)  # blocks this loop, which is fine here: nothing else runs on it
        after: list[str | None] = []
        # The pooled connection still goes to the old owner: its first command gets MOVED (not run),
        # the push raises a ConnectionError saying so, and the next one goes to the new owner.
        for n in range(3, 5):
            for _ in range(2):
                try:
                    after.append(await deployed.aio.perform_async(n))
                    break
                except redis.ConnectionError as exc:
                    assert "MOVED" in str(exc) or "retry" in str(exc)
        return before, after

    try:
        before, after = asyncio.run(scenario())
        wait_until(lambda: len(jids(reader, PREFIX)) == 3, timeout=10, message="three jobs queued")
        assert sorted(jids(reader, PREFIX)) == sorted([before[0], *after])  # each once
        assert before[1] is None and len(after) == 2
    finally:
        reader.close()


def test_an_awaitable_push_to_a_tls_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rediss+cluster:// URL with a client certificate: the slot's owner is asked over TLS (on a
    thread) and the push goes to it over TLS. The plain ports read back what was written."""
    with contextlib.closing(RedisCluster(tls=True)) as cluster:
        env = cluster.env()
        assert env["COGWORKER_REDIS_URL"].startswith("rediss+cluster://")
        use_only(monkeypatch, env)
        first, duplicate, later = asyncio.run(push_three())
        reader = cluster.cluster_client()
        try:
            assert jids(reader, PREFIX) == [first] and duplicate is None
            assert reader.zcard(f"{PREFIX}schedule") == 1 and later
        finally:
            reader.close()
