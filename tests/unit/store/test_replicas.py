"""COGWORKER_REDIS_MIN_REPLICAS against a real master, with and without a real replica: a push (one,
scheduled, bulk) returns once WAIT confirms it and raises NotReplicated naming the jids when too few
replicas do, with the jobs written all the same; the fetch loop's WAIT on acknowledgements logs one
line when replicas fall short and one when they are back, and stops stalling the loop meanwhile."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
import structlog

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import replicas
from cogworker.store.connection import connect
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
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
    settings = load_settings(
        redis_url=server.url, redis_min_replicas=min_replicas, redis_min_replicas_timeout_s=0.2
    )
    cw_client.configure(settings)
    return server.client()


def queued(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange("cogworker:queue:default", 0, -1)]


def test_pushes_return_once_a_replica_has_them(master: RedisServer, replica: RedisServer) -> None:
    import demo_jobs

    use(master, 1)
    jid = demo_jobs.record.perform_async("a")
    later = demo_jobs.record.perform_in(60, "b")
    bulk = cogworker.push_bulk(demo_jobs.record, [("c",), ("d",)])
    on_replica = replica.client()
    # WAIT returned: the replica has them already, no polling needed.
    assert set(queued(on_replica)) == {jid, *bulk}
    assert on_replica.zcard("cogworker:schedule") == 1 and later
    on_replica.close()


def test_without_a_replica_a_push_raises_naming_the_job_it_did_write(master: RedisServer) -> None:
    import demo_jobs

    client = use(master, 1)
    with pytest.raises(cogworker.NotReplicated) as err:
        demo_jobs.record.perform_async("a")
    assert err.value.confirmed == 0 and err.value.wanted == 1
    assert list(err.value.jids) == queued(client)  # written: it runs unless the master dies first
    assert err.value.jids[0] in str(err.value) and "COGWORKER_REDIS_MIN_REPLICAS" in str(err.value)
    with pytest.raises(replicas.NotReplicated):
        demo_jobs.record.perform_in(60, "b")
    assert client.zcard("cogworker:schedule") == 1
    client.delete("cogworker:queue:default")
    with pytest.raises(replicas.NotReplicated) as bulk_err:
        cogworker.push_bulk(demo_jobs.record, [(str(i),) for i in range(7)])
    assert sorted(bulk_err.value.jids) == sorted(queued(client))
    assert "and 2 more" in str(bulk_err.value)


def test_a_unique_push_that_raised_not_replicated_keeps_its_claim_and_status(master: RedisServer) -> None:
    import unique_jobs

    client = use(master, 1)
    with pytest.raises(cogworker.NotReplicated) as err:
        unique_jobs.rebuild.set(status=True).perform_async(1)
    (jid,) = err.value.jids
    assert cogworker.status(jid) == "queued"  # it is queued: it runs unless the master dies first
    assert unique_jobs.rebuild.perform_async(1) is None  # so pushing it again is a duplicate
    assert queued(client) == [jid]


def test_off_means_no_wait(master: RedisServer) -> None:
    import demo_jobs

    client = use(master, 0)
    demo_jobs.record.perform_async("a")
    cogworker.push_bulk(demo_jobs.record, [("b",)])
    assert "cmdstat_wait" not in client.info("commandstats")


def test_a_bulk_push_reloads_its_script_after_a_flush(master: RedisServer, replica: RedisServer) -> None:
    import demo_jobs

    client = use(master, 1)
    cogworker.push_bulk(demo_jobs.record, [("a",)])
    client.script_flush()
    assert len(cogworker.push_bulk(demo_jobs.record, [("b",)])) == 1
    assert len(queued(client)) == 2


def fetcher(server: RedisServer, identity: str, ack_wait: replicas.AckWait | None) -> ReliableFetch:
    settings = load_settings(redis_url=server.url, redis_min_replicas=1, redis_min_replicas_timeout_s=0.2)
    client = connect(settings)
    return ReliableFetch(client, connect(settings), Scripts(client), identity, settings.queue_spec, ack_wait)


def test_acks_wait_for_a_replica_and_say_once_when_they_cannot(
    master: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(redis_url=master.url, redis_min_replicas=1, redis_min_replicas_timeout_s=0.2)
    ack_wait = replicas.AckWait.of(settings)
    assert ack_wait is not None and replicas.AckWait.of(load_settings(redis_url=master.url)) is None
    fetch = fetcher(master, "me", ack_wait)
    client = master.client()
    client.lpush(
        "cogworker:queue:default", *(json.dumps({"jid": f"j{i}", "queue": "default"}) for i in range(3))
    )
    works = fetch.fetch(3, []).works
    assert len(works) == 3
    with structlog.testing.capture_logs() as logs:
        started = time.monotonic()
        assert fetch.fetch(0, [(works[0].raw, "j0")]).acked == 1  # waited for the timeout, then logged
        assert time.monotonic() - started >= 0.2
        assert ack_wait.command_now() is None  # short: no WAIT on the next fetches...
        assert fetch.fetch(0, [(works[1].raw, "j1")]).acked == 1
        monkeypatch.setattr(replicas, "PROBE_EVERY_S", 0.0)
        ack_wait._next_probe = 0.0  # ...but a short probe once a second: due now
        assert ack_wait.command_now() == ("WAIT", 1, replicas.PROBE_TIMEOUT_MS)
        ack_wait.observe(1)  # a replica confirmed
        assert ack_wait.command_now() == ack_wait.command
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "acks_not_replicated",
        "acks_replicated_again",
    ]
    client.close()
