"""An awaitable push whose reply is lost after Redis ran it, whose command never reached Redis, or
whose outcome can't be found out, through the fault-injecting proxy (tests/support/resp_proxy.py)
in front of a private redis-server: the same outcomes as the sync push (tests/unit/api/test_lost_reply.py).

- lost after it ran: the push finds its job written (its marker) and returns its jid; nothing is
  undone (the unique claim and the "queued" status stay), and a re-send makes no second copy;
- never ran: nothing was written, the push raises a ConnectionError (not PushOutcomeUnknown), and
  what the chain took is given back, so pushing again runs it once;
- unknown (the check can't reach Redis either): PushOutcomeUnknown, nothing undone; the same payload
  sent again is queued once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
import status_jobs
import unique_jobs

import cogworker
import cogworker.aio
from cogworker.api import client as cw_client
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy


@pytest.fixture
def direct(private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> redis.Redis:
    """A client of the private Redis that bypasses the proxy."""
    monkeypatch.setenv("COGWORKER_REDIS_URL", private_redis.url)
    return private_redis.client()


@pytest.fixture
def through_proxy(resp_proxy: RespProxy, direct: redis.Redis) -> Settings:
    """The job API pointed at the proxy."""
    settings = load_settings(redis_url=resp_proxy.url, redis_timeout_s=1)
    cw_client.configure(settings)
    return settings


def queued(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(keys.queue("default"), 0, -1)]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_push_whose_reply_was_lost_returns_its_jid_and_undoes_nothing(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    rule = resp_proxy.lose_reply(script="push_batch")
    jid = run(unique_jobs.rebuild.aio.perform_async(7))  # written, and the client finds out: no error
    assert rule.fired == 1 and jid is not None
    assert [job["jid"] for job in queued(direct)] == [jid]
    (claim,) = direct.keys(keys.unique("*"))
    assert direct.get(claim) == jid  # kept: the job is queued
    assert run(unique_jobs.rebuild.aio.perform_async(7)) is None  # the caller's retry: a duplicate
    assert len(queued(direct)) == 1


def test_a_push_held_past_the_timeout_stands_and_keeps_its_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    """The reply comes after COGWORKER_REDIS_TIMEOUT_S (1 s here): the client gives up waiting, asks
    on a new connection, finds its job written, and returns its jid."""
    resp_proxy.delay_reply(30, script="push_batch")
    jid = run(unique_jobs.rebuild.aio.perform_async(8))
    assert jid is not None and [job["jid"] for job in queued(direct)] == [jid]
    assert run(unique_jobs.rebuild.aio.perform_async(8)) is None


def test_a_tracked_push_whose_reply_was_lost_stays_queued(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    resp_proxy.lose_reply(script="push_batch")
    jid = run(status_jobs.tracked.aio.perform_async("lost"))
    assert jid is not None and direct.hget(keys.status(jid), "status") == "queued"


def test_a_push_that_never_ran_raises_and_gives_everything_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    rule = resp_proxy.drop_command(script="push_batch")
    with pytest.raises(redis.ConnectionError) as caught:
        run(unique_jobs.rebuild.aio.perform_async(10))
    assert rule.fired == 1
    assert not isinstance(caught.value, cogworker.PushOutcomeUnknown)  # known: not written
    assert queued(direct) == []
    assert direct.keys(keys.unique("*")) == []  # the claim given back
    jid = run(unique_jobs.rebuild.aio.perform_async(10))  # pushed again: one copy
    assert [job["jid"] for job in queued(direct)] == [jid]


def test_a_tracked_push_that_never_ran_forgets_its_status(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    resp_proxy.drop_command(script="push_batch")
    payload = status_jobs.tracked.aio.build(("dropped",), {})
    with pytest.raises(redis.ConnectionError):
        run(status_jobs.tracked.aio.send(payload))
    assert not direct.exists(keys.status(payload["jid"]))


def test_an_unknown_outcome_raises_keeps_the_claim_and_a_resend_is_queued_once(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    payload = unique_jobs.rebuild.aio.build((11,), {})
    resp_proxy.lose_reply(script="push_batch")
    resp_proxy.drop_command(script="push_check")
    with pytest.raises(cogworker.PushOutcomeUnknown) as caught:
        run(unique_jobs.rebuild.aio.send(dict(payload)))
    assert isinstance(caught.value, redis.ConnectionError)  # what callers already catch
    assert caught.value.jids == (payload["jid"],)
    assert len(direct.keys(keys.unique("*"))) == 1  # kept: it may be queued
    assert run(unique_jobs.rebuild.aio.send(dict(payload))) == payload["jid"]
    assert [job["jid"] for job in queued(direct)] == [payload["jid"]]


def test_push_bulk_that_never_ran_gives_every_claim_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    args = [(1,), (2,), (3,)]
    resp_proxy.drop_command(script="push_batch")
    with pytest.raises(redis.ConnectionError):
        run(cogworker.aio.push_bulk(unique_jobs.rebuild, args))
    assert queued(direct) == [] and direct.keys(keys.unique("*")) == []
    assert None not in run(cogworker.aio.push_bulk(unique_jobs.rebuild, args))
    assert len(queued(direct)) == 3


def test_push_bulk_whose_reply_was_lost_keeps_every_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    args = [(1,), (2,), (3,)]
    resp_proxy.lose_reply(script="push_batch")
    jids = run(cogworker.aio.push_bulk(unique_jobs.rebuild, args))
    assert None not in jids
    assert run(cogworker.aio.push_bulk(unique_jobs.rebuild, args)) == [None, None, None]
    assert sorted(job["jid"] for job in queued(direct)) == sorted(jids)


def test_a_claim_whose_reply_was_lost_is_given_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    """The claim's own SET NX, before the job's write: nothing is pushed and the claim is free."""
    resp_proxy.lose_reply(command="SET", arg=keys.unique(""))
    with pytest.raises(redis.ConnectionError):
        run(unique_jobs.rebuild.aio.perform_async(12))
    assert direct.keys(keys.unique("*")) == [] and queued(direct) == []


def test_a_push_whose_reply_was_lost_with_replicas_wanted_raises_not_replicated(
    resp_proxy: RespProxy, direct: redis.Redis
) -> None:
    """As the sync push: the WAIT's answer is lost with the push's, so the job written (found by its
    marker) is reported with no replica known to hold it, and its claim stands."""
    wanted = {"redis_min_replicas": 1, "redis_min_replicas_timeout_s": 0.2}
    cw_client.configure(load_settings(redis_url=resp_proxy.url, redis_timeout_s=1, **wanted))
    resp_proxy.lose_reply(script="push_batch")
    with pytest.raises(cogworker.NotReplicated) as raised:
        run(unique_jobs.rebuild.aio.perform_async(8))
    [job] = queued(direct)
    assert raised.value.jids == (job["jid"],)
    assert raised.value.confirmed == 0 and raised.value.wanted == 1
    assert run(unique_jobs.rebuild.aio.perform_async(8)) is None  # written: its claim stands
