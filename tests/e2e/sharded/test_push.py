"""The job API's pushes in the sharded layout, on a real 3-master cluster (api/push_shards.py,
api/push_settle.py, api/push_write.py): each job in one partition of its queue, in that partition's
slot, on its master; the lost-reply check asked of that partition; the WAIT sent to that master."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.crc import key_slot

import cogworker
import cogworker.aio
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.api import push_outcome, push_settle, push_shards, push_write
from cogworker.store import async_connection, key_guard, keys, shards
from cogworker.store.replicas import NotReplicated
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api, master_of, queued, scheduled
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.resp_proxy import RespProxy


@cogworker.job(queue="spread")
def spread_job(n: int) -> None:
    """Never run here: these tests read what a push wrote."""


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="spread=4,urgent=2"):
        yield


def _partitions(queue: str) -> tuple[shards.Partition, ...]:
    return shards.push_partitions(queue)


def _partition_of(jid: str | None, queue: str = "spread") -> shards.Partition:
    return push_shards.partition_of({"queue": queue, "jid": jid})


def test_pushes_spread_over_the_partitions_each_job_in_one(api: None, cluster: redis.RedisCluster) -> None:
    jids = [spread_job.perform_async(n) for n in range(100)]
    parts = _partitions("spread")
    assert len(parts) == 4
    found = {p: queued(cluster, p) for p in parts}
    # Every job once, in the partition its jid names; 100 random jids leave no partition empty.
    assert sorted(j for js in found.values() for j in js) == sorted(str(j) for j in jids)
    for p, in_p in found.items():
        assert in_p, f"partition {p} got no job"
        assert all(_partition_of(j) == p for j in in_p)
        assert cluster.smembers(shards.registry(p)) == {"spread"}
        assert cluster.get(shards.pushed(p, in_p[0])) is not None  # its marker, in its slot
    # The queue is listed and its partition count recorded in the home slot, before the first push.
    assert cluster.smembers(keys.QUEUES) == {"spread"}
    assert shards.recorded_partitions(cw_client.connection()) == {"spread": 4}
    assert every_key_of(cluster)
    # Nothing of the one-slot layout's: no queue, no marker outside a partition.
    assert not [k for k in every_key_of(cluster) if not k.startswith(("cw:{home}:", "cw:{spread#"))]


def every_key_of(cluster: redis.RedisCluster) -> list[str]:
    return [str(k) for k in cluster.keys(target_nodes=redis.RedisCluster.PRIMARIES)]


def test_a_partitions_jobs_keep_their_push_order(api: None, cluster: redis.RedisCluster) -> None:
    jids = [str(spread_job.perform_async(n)) for n in range(40)]
    for p in _partitions("spread"):
        assert queued(cluster, p) == [j for j in jids if _partition_of(j) == p]


def test_set_queue_and_a_one_partition_queue(api: None, cluster: redis.RedisCluster) -> None:
    jid = spread_job.set(queue="plain").perform_async(1)
    assert queued(cluster, shards.Partition("plain", 0)) == [jid]
    assert cluster.smembers(keys.QUEUES) == {"plain"}
    jid2 = spread_job.set(queue="urgent").perform_async(2)
    assert sum(queued(cluster, p) == [jid2] for p in _partitions("urgent")) == 1


def test_a_scheduled_push_waits_in_its_partitions_schedule(api: None, cluster: redis.RedisCluster) -> None:
    later = spread_job.perform_in(3600, 1)
    at = spread_job.perform_at(time.time() + 60, 2)
    now = spread_job.perform_at(time.time() - 5, 3)  # already due: to the queue
    where = {j: _partition_of(j) for j in (later, at, now)}
    assert later in scheduled(cluster, where[later])
    assert at in scheduled(cluster, where[at])
    assert now in queued(cluster, where[now])
    assert not cluster.exists(keys.SCHEDULE)  # the home slot's schedule is not used


def test_a_bulk_push_writes_each_partition_once(
    api: None, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[shards.Partition | None, int]] = []
    real = push_write.write

    def counted(
        conn: Any, settings: Any, batch: Any, attempt: str, partition: Any = None, home: Any = None
    ) -> None:
        calls.append((partition, len(batch)))
        real(conn, settings, batch, attempt, partition, home)

    monkeypatch.setattr(push_write, "write", counted)
    jids = cogworker.push_bulk(spread_job, [(n,) for n in range(300)])
    # One push_batch.lua call per partition, in partition order, each with every job of that partition.
    assert [p for p, _ in calls] == list(_partitions("spread"))
    assert sum(n for _, n in calls) == 300
    for p, n in calls:
        assert p is not None
        assert len(queued(cluster, p)) == n
    assert sorted(j for p in _partitions("spread") for j in queued(cluster, p)) == sorted(map(str, jids))


def test_a_bulk_push_stops_at_the_partition_that_fails_and_a_resend_makes_no_copy(
    api: None, cluster: redis.RedisCluster
) -> None:
    parts = _partitions("spread")
    cluster.set(shards.queue_key(parts[1]), "not a list")  # partition 1's write is refused
    jobs = [cw_client.build_job("t.job", (n,), {}, queue="spread", options={}, at=None) for n in range(200)]
    by_partition = {p: [str(j["jid"]) for j in jobs if push_shards.partition_of(j) == p] for p in parts}
    with pytest.raises(key_guard.WrongTypeKey) as raised:
        push_settle.write_settled(
            cw_client.connection(),
            jobs,
            None,
            settings=cw_client.settings(),
            clients=cw_client.shard_clients,
            abandon_chain=True,
        )
    # Partition 0 written, 1 refused (nothing of it), 2 and 3 never sent; the error says what stands.
    assert sorted(queued(cluster, parts[0])) == sorted(by_partition[parts[0]])
    assert cluster.type(shards.queue_key(parts[1])) == "string"
    assert not queued(cluster, parts[2]) and not queued(cluster, parts[3])
    note = "".join(raised.value.__notes__)
    assert f"{len(by_partition[parts[0]])} job(s) of this push were written" in note
    # The same payloads sent again once the key is fixed: the missing jobs only, no copy of partition 0's.
    cluster.delete(shards.queue_key(parts[1]))
    push_settle.write_settled(
        cw_client.connection(),
        jobs,
        None,
        settings=cw_client.settings(),
        clients=cw_client.shard_clients,
        abandon_chain=True,
    )
    for p in parts:
        assert sorted(queued(cluster, p)) == sorted(by_partition[p])


def test_the_same_payload_sent_again_lands_once(api: None, cluster: redis.RedisCluster) -> None:
    payload = spread_job.build((7,), {})
    assert spread_job.send(payload) == payload["jid"]
    assert spread_job.send(dict(payload)) == payload["jid"]
    found = [j for p in _partitions("spread") for j in queued(cluster, p)]
    assert found == [payload["jid"]]


def test_the_outcome_check_asks_the_partition_written(api: None, cluster: redis.RedisCluster) -> None:
    """A write whose reply is thrown away, then the check a lost reply runs: it finds the job in its
    partition's markers; with no write, the check fences the attempt off so a late write does nothing."""
    clients = cw_client.shard_clients()
    settings = cw_client.settings()
    lost = ConnectionError("reply lost")
    written = cw_client.build_job("t.job", (1,), {}, queue="spread", options={}, at=None)
    p = push_shards.partition_of(written)
    push_write.write(clients.of(p), settings, [written], "attempt-a", p, clients.home)  # its reply: ignored
    assert push_outcome.unwritten(clients.of(p), [written], "attempt-a", lost, p, clients.home) == []

    never = cw_client.build_job("t.job", (2,), {}, queue="spread", options={}, at=None)
    q = push_shards.partition_of(never)
    assert push_outcome.unwritten(clients.of(q), [never], "attempt-b", lost, q, clients.home) == [never]
    assert cluster.get(shards.pushed(q, str(never["jid"]))) == "x:attempt-b"  # fenced, in its slot
    push_write.write(
        clients.of(q), settings, [never], "attempt-b", q, clients.home
    )  # the write arriving late
    assert str(never["jid"]) not in queued(cluster, q)
    assert queued(cluster, p).count(str(written["jid"])) == 1


@pytest.fixture
def proxied(
    env: dict[str, str],
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[RespProxy, shards.Partition]]:
    """The job API with partition `lossy#0`'s client going through a RESP proxy in front of the
    master serving its slot (the other slots, the home's too, reached directly)."""
    with configured_api(monkeypatch, COGWORKER_REDIS_TIMEOUT_S="2"):
        p = shards.Partition("lossy", 0)
        proxy = RespProxy(master_of(redis_cluster, p))
        clients = cw_client.shard_clients()
        slot = key_slot(b"lossy#0")
        clients._by_slot[slot] = proxy.client(socket_timeout=2, encoding_errors="surrogateescape")
        try:
            yield proxy, p
        finally:
            proxy.close()


def test_a_lost_reply_through_a_partitions_proxy_finds_the_job_written(
    proxied: tuple[RespProxy, shards.Partition], cluster: redis.RedisCluster
) -> None:
    proxy, p = proxied
    rule = proxy.lose_reply(script="push_batch")
    jid = spread_job.set(queue="lossy").perform_async(1)
    assert rule.fired == 1
    assert queued(cluster, p) == [jid]  # written once, the push returned its jid


def test_a_dropped_push_through_a_partitions_proxy_raises_and_writes_nothing(
    proxied: tuple[RespProxy, shards.Partition], cluster: redis.RedisCluster
) -> None:
    proxy, p = proxied
    rule = proxy.drop_command(script="push_batch")
    payload = spread_job.set(queue="lossy").build((1,), {})
    with pytest.raises(redis.ConnectionError):
        spread_job.send(payload)
    assert rule.fired == 1
    assert queued(cluster, p) == []
    # The check fenced the attempt off in the partition's slot; sending the payload again writes it.
    assert str(cluster.get(shards.pushed(p, payload["jid"]))).startswith("x:")
    assert spread_job.send(payload) == payload["jid"]
    assert queued(cluster, p) == [payload["jid"]]


def test_min_replicas_waits_on_the_master_holding_the_write(
    env: dict[str, str],
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with configured_api(monkeypatch, COGWORKER_REDIS_MIN_REPLICAS="1"):
        p = shards.Partition("replicated", 0)
        spread_job.set(queue="replicated").perform_async(0)  # recorded, scripts loaded
        for port in redis_cluster.ports:
            redis_cluster.client(port).config_resetstat()
        jid = spread_job.set(queue="replicated").perform_async(1)
        assert jid in queued(cluster, p)
        waits = {port: _calls(redis_cluster, port, "wait") for port in redis_cluster.ports}
        assert waits.pop(master_of(redis_cluster, p)) == 1
        assert set(waits.values()) == {0}
    # Two replicas wanted, each master has one: written on its master, NotReplicated says so.
    with configured_api(
        monkeypatch, COGWORKER_REDIS_MIN_REPLICAS="2", COGWORKER_REDIS_MIN_REPLICAS_TIMEOUT_S="0.2"
    ):
        with pytest.raises(NotReplicated) as raised:
            spread_job.set(queue="replicated").perform_async(2)
        assert raised.value.confirmed == 1
        assert raised.value.jids[0] in queued(cluster, shards.Partition("replicated", 0))


def _calls(redis_cluster: RedisCluster, port: int, command: str) -> int:
    node = redis_cluster.client(port)
    try:
        stats = node.info("commandstats")
    finally:
        node.close()
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_awaitable_pushes_land_in_partitions(api: None, cluster: redis.RedisCluster) -> None:
    async def push() -> tuple[list[str | None], str | None, str | None]:
        try:
            one = await spread_job.aio.perform_async(1)
            later = await spread_job.aio.perform_in(3600, 2)
            bulk = await cogworker.aio.push_bulk(spread_job, [(n,) for n in range(60)])
            return bulk, one, later
        finally:
            await cogworker.aio.close()

    bulk, one, later = asyncio.run(push())
    parts = _partitions("spread")
    assert sorted(j for p in parts for j in queued(cluster, p)) == sorted(map(str, [one, *bulk]))
    assert sum(later in scheduled(cluster, p) for p in parts) == 1
    for jid in (one, *bulk):
        assert jid in queued(cluster, _partition_of(jid))
    assert shards.recorded_partitions(cw_client.connection()) == {"spread": 4}


def test_a_first_call_configured_only_by_the_environment_pushes_into_a_partition(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    env = sharded_env(redis_cluster, COGWORKER_QUEUE_PARTITIONS="3", COGWORKER_REQUIRE="demo_jobs")
    url = env.pop("COGWORKER_REDIS_URL")
    jid = first_call("from demo_jobs import record; print(record.perform_async('a'))", url, **env)
    p = shards.Partition("default", zlib.crc32(jid.encode()) % 3)  # api/push_shards.py's choice
    stored = cluster.lrange(f"cw:{{default#{p.index}}}:queue", 0, -1)
    assert [str(codec.loads(raw)["jid"]) for raw in stored] == [jid]
    assert cluster.hget("cw:{home}:partitions", "default") == "3"
    assert cluster.smembers("cw:{home}:queues") == {"default"}


def _through_proxy(proxy: RespProxy, push: Callable[[], Awaitable[Any]]) -> Any:
    """Run `push` on a new loop whose client for partition `lossy#0` goes through `proxy`."""

    async def run() -> Any:
        try:
            await async_connection.for_loop(cw_client.settings())
            entry = async_connection._clients[asyncio.get_running_loop()]
            entry.partitions[key_slot(b"lossy#0")] = aredis.Redis(
                host="127.0.0.1",
                port=proxy.port,
                retry=None,
                socket_timeout=2,
                decode_responses=True,
                encoding_errors="surrogateescape",
            )
            return await push()
        finally:
            await cogworker.aio.close()

    return asyncio.run(run())


def test_an_awaitable_push_whose_reply_is_lost_finds_the_job_in_its_partition(
    proxied: tuple[RespProxy, shards.Partition], cluster: redis.RedisCluster
) -> None:
    proxy, p = proxied
    rule = proxy.lose_reply(script="push_batch")
    jid = _through_proxy(proxy, lambda: spread_job.set(queue="lossy").aio.perform_async(1))
    assert rule.fired == 1
    assert queued(cluster, p) == [jid]


def test_an_awaitable_bulk_push_dropped_raises_and_writes_nothing(
    proxied: tuple[RespProxy, shards.Partition], cluster: redis.RedisCluster
) -> None:
    proxy, p = proxied
    rule = proxy.drop_command(script="push_batch")
    with pytest.raises(redis.ConnectionError):
        _through_proxy(proxy, lambda: cogworker.aio.push_bulk(spread_job, [(1,), (2,)], queue="lossy"))
    assert rule.fired == 1
    assert queued(cluster, p) == []
    # Fenced off in the partition's slot: the attempt can't land later.
    fences = [cluster.get(k) for k in cluster.keys("cw:{lossy#0}:pushed:*", target_nodes=cluster.PRIMARIES)]
    assert len(fences) == 2 and all(str(f).startswith("x:") for f in fences)


def test_a_partition_key_of_the_wrong_type_is_named_and_sent_to_the_key_guards(
    api: None, cluster: redis.RedisCluster
) -> None:
    p = shards.Partition("plain", 0)
    cluster.set(shards.queue_key(p), "not a list")
    with pytest.raises(key_guard.WrongTypeKey) as raised:
        spread_job.set(queue="plain").perform_async(1)
    assert (raised.value.key, raised.value.found) == (shards.queue_key(p), "string")
    assert cluster.smembers(keys.GUARD_REQUESTS) == {shards.queue_key(p)}  # asked in the home slot
    # The partition's registry of the wrong type: the job is written all the same, the registry reported.
    cluster.delete(shards.queue_key(p), keys.GUARD_REQUESTS)
    cluster.set(shards.registry(p), "not a set")
    jid = spread_job.set(queue="plain").perform_async(2)
    assert queued(cluster, p) == [jid]
    assert cluster.smembers(keys.GUARD_REQUESTS) == {shards.registry(p)}


def test_an_awaitable_push_names_a_partition_key_of_the_wrong_type_and_reports_a_bad_registry(
    api: None, cluster: redis.RedisCluster
) -> None:
    p = shards.Partition("plain", 0)

    async def push(n: int) -> str | None:
        try:
            return await spread_job.set(queue="plain").aio.perform_async(n)
        finally:
            await cogworker.aio.close()

    cluster.set(shards.queue_key(p), "not a list")
    with pytest.raises(key_guard.WrongTypeKey) as raised:
        asyncio.run(push(1))
    assert (raised.value.key, raised.value.found) == (shards.queue_key(p), "string")
    assert cluster.smembers(keys.GUARD_REQUESTS) == {shards.queue_key(p)}  # asked in the home slot
    cluster.delete(shards.queue_key(p), keys.GUARD_REQUESTS)
    cluster.set(shards.registry(p), "not a set")
    jid = asyncio.run(push(2))
    assert queued(cluster, p) == [jid]
    assert cluster.smembers(keys.GUARD_REQUESTS) == {shards.registry(p)}
