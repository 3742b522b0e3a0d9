"""Awaitable pushes (`job.aio`, `cogworker.aio.push_bulk`) against the session's real Redis: each
writes what the sync push writes, through the same middleware, unique claims, statuses, typed
arguments, batches and testing modes (api/aio_client.py, api/aio_features.py, api/aio_write.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import batch_jobs as bj
import pytest
import redis
import typed_jobs as tj

import cogworker
import cogworker.aio
from cogworker import testing
from cogworker.api.middleware import ClientNext
from cogworker.settings import Settings
from cogworker.store import keys


@cogworker.job(name="aio.plain")
def plain(n: int, label: str = "") -> None: ...


@cogworker.job(name="aio.unique", unique="until_executed")
def once(n: int) -> None: ...


@cogworker.job(name="aio.tracked", status=True)
def tracked(n: int) -> None: ...


@cogworker.job(name="aio.inline_probe")
def inline_probe(key: str) -> str:
    return key


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(keys.queue(queue), 0, -1)]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_perform_async_writes_the_same_payload_as_the_sync_push(r: redis.Redis, configured: Settings) -> None:
    jid = run(plain.aio.perform_async(7, label="x"))
    sync_jid = plain.perform_async(8, label="y")
    aio_job, sync_job = sorted(queued(r), key=lambda job: job["args"][0])
    assert aio_job["jid"] == jid and sync_job["jid"] == sync_jid
    assert aio_job["args"] == [7] and aio_job["kwargs"] == {"label": "x"}
    assert set(aio_job) == set(sync_job)  # the same fields: enqueued_at, retry, created_at...
    assert r.smembers(keys.QUEUES) == {"default"}
    assert r.get(keys.pushed(jid)) is not None  # its marker: a re-send makes no second copy


def test_perform_in_and_perform_at_schedule_the_job(r: redis.Redis, configured: Settings) -> None:
    async def push() -> tuple[str | None, str | None]:
        later = await plain.aio.perform_in(dt.timedelta(minutes=5), 1)
        at = await plain.aio.perform_at(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), 2)
        return later, at

    before = time.time()
    later, at = run(push())
    scores = dict(
        (json.loads(raw)["jid"], score) for raw, score in r.zrange(keys.SCHEDULE, 0, -1, withscores=True)
    )
    assert scores[later] == pytest.approx(before + 300, abs=5)
    assert scores[at] == pytest.approx(before + 3600, abs=5)
    assert queued(r) == []
    with pytest.raises(TypeError, match="aware datetime"):
        run(plain.aio.perform_at(dt.datetime.now(), 3))  # naive on purpose
    with pytest.raises(TypeError, match="seconds or a timedelta"):
        run(plain.aio.perform_in("soon", 3))  # type: ignore[arg-type]


def test_set_changes_the_options_of_an_awaitable_push(r: redis.Redis, configured: Settings) -> None:
    async def push() -> tuple[str | None, str | None]:
        first = await plain.set(queue="urgent", retry=3).aio.perform_async(1)
        second = await plain.aio.set(queue="urgent").perform_async(2)
        return first, second

    first, second = run(push())
    by_jid = {job["jid"]: job for job in queued(r, "urgent")}
    assert by_jid[first]["retry"] == 3 and by_jid[second]["retry"] is True
    with pytest.raises(TypeError, match="unknown job option"):
        plain.aio.set(colour="red")


def test_a_unique_duplicate_returns_none_and_the_claim_is_the_first_push(
    r: redis.Redis, configured: Settings
) -> None:
    async def push() -> list[str | None]:
        return [await once.aio.perform_async(1), await once.aio.perform_async(1), once.perform_async(1)]

    first, duplicate, sync_duplicate = run(push())
    assert first is not None and duplicate is None and sync_duplicate is None
    assert [job["jid"] for job in queued(r)] == [first]
    (claim,) = r.keys(keys.unique("*"))
    assert r.get(claim) == first


def test_the_same_payload_sent_again_writes_no_second_copy(r: redis.Redis, configured: Settings) -> None:
    payload = once.aio.build((5,), {})

    async def send_twice() -> list[str | None]:
        return [await once.aio.send(dict(payload)), await once.aio.send(dict(payload))]

    assert run(send_twice()) == [payload["jid"], payload["jid"]]  # its own claim: not a duplicate
    assert [job["jid"] for job in queued(r)] == [payload["jid"]]


def test_a_tracked_job_is_queued_before_it_is_written(r: redis.Redis, configured: Settings) -> None:
    jid = run(tracked.aio.perform_async(1))
    assert cogworker.status(jid) == "queued"
    assert r.pttl(keys.status(jid)) > 0


def test_status_all_tracks_every_awaitable_push(r: redis.Redis, settings: Settings) -> None:
    cogworker.configure(settings.model_copy(update={"status_all": True}))
    jid = run(plain.aio.perform_async(1))
    assert cogworker.status(jid) == "queued"
    assert queued(r)[0]["status"] is True


def test_typed_arguments_are_converted_as_the_sync_push_converts_them(
    r: redis.Redis, configured: Settings
) -> None:
    order = tj.Order(id=uuid.uuid4(), total=Decimal("9.99"), ship_to=tj.Address(street="Main", zip="02134"))
    window = tj.Window(dt.datetime(2030, 1, 1, tzinfo=dt.UTC), dt.datetime(2030, 1, 2, tzinfo=dt.UTC))
    run(tj.ship.aio.perform_async(order, window, tj.Speed.EXPRESS))
    tj.ship.perform_async(order, window, tj.Speed.EXPRESS)
    aio_job, sync_job = queued(r, "typed")
    assert aio_job["args"] == sync_job["args"]
    assert aio_job["args"][0]["total"] == "9.99"
    with pytest.raises(TypeError, match=r"kwargs\['speed'\]: Input should be 'standard' or 'express'"):
        run(tj.ship.aio.perform_async(order, window, speed="teleport"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"args\[1\]"):
        run(cogworker.aio.push_bulk(tj.ship, [(order, window), (order, "not a window")]))
    assert len(queued(r, "typed")) == 2


def test_client_middleware_runs_around_an_awaitable_push(r: redis.Redis, configured: Settings) -> None:
    seen: list[str] = []

    def tag(job: dict[str, Any], call_next: ClientNext) -> Any:
        job["tenant"] = "acme"
        seen.append(str(job["jid"]))
        return call_next(job)

    def veto(job: dict[str, Any], call_next: ClientNext) -> Any:
        return None if job["args"] == [13] else call_next(job)

    cogworker.client_chain.add(tag)
    cogworker.client_chain.add(veto)
    jid = run(plain.aio.perform_async(1))
    assert run(plain.aio.perform_async(13)) is None
    assert [job["tenant"] for job in queued(r)] == ["acme"]
    assert seen[0] == jid and len(seen) == 2


def test_a_middleware_stopping_a_unique_push_gives_its_claim_back(
    r: redis.Redis, configured: Settings
) -> None:
    def veto(job: dict[str, Any], call_next: ClientNext) -> Any:
        return None

    cogworker.client_chain.add(veto)
    assert run(once.aio.perform_async(1)) is None
    assert r.keys(keys.unique("*")) == []
    cogworker.client_chain.remove(veto)
    assert run(once.aio.perform_async(1)) is not None


def test_a_push_inside_a_batch_block_joins_the_batch(r: redis.Redis, configured: Settings) -> None:
    async def push() -> tuple[str, str | None]:
        with cogworker.batch("aio", on_complete=bj.on_complete, callback_args=("x",)) as b:
            jid = await bj.ok.aio.perform_async("a")
        return b.bid, jid

    bid, jid = run(push())
    (member,) = queued(r)
    assert member["jid"] == jid and member["bid"] == bid
    assert cogworker.batch_status(bid).total == 1


def test_push_bulk_writes_every_job_and_skips_duplicates(r: redis.Redis, configured: Settings) -> None:
    jids = run(cogworker.aio.push_bulk(once, [(1,), (2,), (1,)]))
    assert jids[0] is not None and jids[1] is not None and jids[2] is None
    assert sorted(job["args"][0] for job in queued(r)) == [1, 2]
    many = [(i,) for i in range(1500)]
    later = run(cogworker.aio.push_bulk(plain.set(queue="bulk"), many, at=time.time() + 60))
    assert len(later) == 1500 and r.zcard(keys.SCHEDULE) == 1500
    with pytest.raises(TypeError, match="push_bulk takes a job"):
        run(cogworker.aio.push_bulk(print, [(1,)]))  # type: ignore[arg-type]


def test_the_fake_mode_records_awaitable_pushes(r: redis.Redis, configured: Settings) -> None:
    with testing.fake():
        jid = run(plain.aio.perform_async(3, label="faked"))
        run(cogworker.aio.push_bulk(plain, [(4,)]))
        assert plain.jobs[0]["jid"] == jid
        assert [job["args"] for job in plain.jobs] == [[3], [4]]
    assert queued(r) == []


def test_the_inline_mode_runs_the_job_when_awaited(r: redis.Redis, configured: Settings) -> None:
    ran: list[str] = []

    def record(job: dict[str, Any], call_next: Callable[[], None]) -> None:
        ran.append(job["args"][0])
        call_next()

    cogworker.server_chain.add(record)
    with testing.inline():
        run(inline_probe.aio.perform_async("now"))
        assert ran == ["now"]
    assert queued(r) == []


def test_each_event_loop_gets_its_own_client(r: redis.Redis, configured: Settings) -> None:
    from cogworker.store import async_connection

    async def client_of_loop() -> object:
        await plain.aio.perform_async(1)
        return await async_connection.for_loop(cogworker.api.client.settings())

    first, second = run(client_of_loop()), run(client_of_loop())
    assert first is not second
    # asyncio.run closed each loop's client as its loop shut down: no connection is left open.
    for conn in (first, second):
        assert conn.connection_pool._in_use_connections == set()  # type: ignore[attr-defined]
        assert all(not c.is_connected for c in conn.connection_pool._available_connections)  # type: ignore[attr-defined]
    assert len(queued(r)) == 2


def test_client_close_closes_the_running_loops_client(r: redis.Redis, settings: Settings) -> None:
    from cogworker.api import client
    from cogworker.store import async_connection

    name = "aio-close-test"
    cogworker.configure(settings.model_copy(update={"redis_url": f"{settings.redis_url}?client_name={name}"}))

    def ours() -> int:
        return sum(1 for c in r.client_list() if c.get("name") == name)

    async def settled_count(wanted: int) -> int:
        """The count of our connections once it is `wanted`, or after 5 s (Redis sees a close late)."""
        deadline = time.monotonic() + 5
        while (found := ours()) != wanted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return found

    async def scenario() -> list[int]:
        await plain.aio.perform_async(1)
        counts = [ours()]
        client.close()  # sync, from the loop's own thread: the close is handed to the loop
        counts.append(await settled_count(0))
        await plain.aio.perform_async(2)  # the next push connects again
        counts.append(ours())
        await cogworker.aio.close()
        counts.append(await settled_count(0))
        return counts

    assert run(scenario()) == [1, 0, 1, 0]
    assert async_connection._clients == {} or all(loop.is_closed() for loop in async_connection._clients)
    assert len(queued(r)) == 2
