"""A client write whose reply is lost after Redis ran it, or whose command never reached Redis,
through the fault-injecting proxy (tests/support/resp_proxy.py) in front of a private redis-server.

A push whose reply was lost stands when the client can find out it was written (its marker), and
what the chain took for it (a unique claim, batch membership) stays; a push that never ran gives it
back; a push whose outcome can't be found out raises PushOutcomeUnknown and keeps it. Pushing the
same payload again makes no second copy. A cancel whose reply was lost answers what it did."""

from __future__ import annotations

import json
from typing import Any

import batch_jobs as bj
import pytest
import redis
import unique_jobs

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from tests.support.inproc import Runner
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy

CALLBACKS = {"on_success": bj.on_success, "on_complete": bj.on_complete}


@pytest.fixture
def direct(private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> redis.Redis:
    """A client of the private Redis that bypasses the proxy; the test jobs record there too."""
    monkeypatch.setenv("COGWORKER_REDIS_URL", private_redis.url)
    return private_redis.client()


@pytest.fixture
def through_proxy(resp_proxy: RespProxy, direct: redis.Redis) -> Settings:
    """The job API pointed at the proxy."""
    settings = load_settings(redis_url=resp_proxy.url, redis_timeout_s=1)
    cw_client.configure(settings)
    return settings


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(keys.queue(queue), 0, -1)]


# A push is one push_batch.lua call. (It was once a pipeline ending in PUBLISH for one job: losing
# that reply too keeps these tests meaningful against such a client.)
def lose_push(proxy: RespProxy) -> None:
    """The push runs; its reply is lost."""
    proxy.lose_reply(script="push_batch")
    proxy.lose_reply(command="PUBLISH")


def drop_push(proxy: RespProxy) -> None:
    """The push never reaches Redis."""
    proxy.drop_command(script="push_batch")
    proxy.drop_command(command="LPUSH")


def lose_the_check_too(proxy: RespProxy) -> None:
    """The push's reply lost, and the check that follows it never reaches Redis: unknown outcome."""
    lose_push(proxy)
    proxy.drop_command(script="push_check")


# C2: a unique push --------------------------------------------------------------------------------


def test_a_unique_push_whose_reply_was_lost_keeps_its_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    lose_push(resp_proxy)
    jid = unique_jobs.rebuild.perform_async(7)  # written, and the client finds out: no error
    assert len(resp_proxy.faults) == 1 and jid is not None
    assert unique_jobs.rebuild.perform_async(7) is None  # the caller's retry: a duplicate
    assert [job["jid"] for job in queued(direct)] == [jid]


def test_a_unique_push_held_past_the_timeout_keeps_its_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    resp_proxy.delay_reply(30, script="push_batch")
    resp_proxy.delay_reply(30, command="PUBLISH")
    jid = unique_jobs.rebuild.perform_async(8)
    assert jid is not None
    assert unique_jobs.rebuild.perform_async(8) is None
    assert [job["jid"] for job in queued(direct)] == [jid]


def test_a_unique_push_of_unknown_outcome_raises_and_keeps_its_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    lose_the_check_too(resp_proxy)
    with pytest.raises(cogworker.PushOutcomeUnknown) as caught:
        unique_jobs.rebuild.perform_async(9)
    assert isinstance(caught.value, redis.ConnectionError)  # what callers already catch
    (job,) = queued(direct)
    assert caught.value.jids == (job["jid"],)
    assert unique_jobs.rebuild.perform_async(9) is None
    assert len(queued(direct)) == 1


def test_a_unique_push_that_never_ran_gives_its_claim_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    drop_push(resp_proxy)
    with pytest.raises(redis.ConnectionError) as caught:
        unique_jobs.rebuild.perform_async(10)
    assert not isinstance(caught.value, cogworker.PushOutcomeUnknown)
    assert queued(direct) == []
    jid = unique_jobs.rebuild.perform_async(10)  # the retry is accepted: one copy
    assert [job["jid"] for job in queued(direct)] == [jid]


# Idempotent push: the same payload (its jid) sent again ----------------------------------------------


def test_the_same_payload_sent_again_after_an_unknown_outcome_is_queued_once(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    for fn in (bj.ok, unique_jobs.rebuild):
        payload = fn.build((11,), {})
        lose_the_check_too(resp_proxy)
        with pytest.raises(cogworker.PushOutcomeUnknown):
            fn.send(payload)
        assert fn.send(payload) == payload["jid"]
        assert [job["jid"] for job in queued(direct)].count(payload["jid"]) == 1
    assert len(queued(direct)) == 2


def test_a_write_arriving_after_its_check_writes_nothing(
    direct: redis.Redis, private_redis: RedisServer
) -> None:
    """The check fences the attempt off: a push still on its way (delayed in the network, Redis
    stalled) can't land after the client was told it wasn't written."""
    from cogworker.api import push_outcome, push_write

    settings = load_settings(redis_url=private_redis.url)
    cw_client.configure(settings)
    job = cw_client.build_job("demo", [1], {}, queue="default", options={}, at=None)
    failure = redis.ConnectionError("lost")
    assert push_outcome.unwritten(direct, [job], "attempt-1", failure) == [job]
    push_write.write(direct, settings, [job], "attempt-1")
    assert queued(direct) == []
    push_write.write(direct, settings, [job], "attempt-2")  # a new push of the payload goes
    assert [j["jid"] for j in queued(direct)] == [job["jid"]]
    assert push_outcome.unwritten(direct, [job], "attempt-2", failure) == []


# C3: push_bulk ------------------------------------------------------------------------------------


def test_push_bulk_whose_reply_was_lost_keeps_every_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    args = [(1,), (2,), (3,)]
    lose_push(resp_proxy)
    jids = cogworker.push_bulk(unique_jobs.rebuild, args)
    assert None not in jids
    assert cogworker.push_bulk(unique_jobs.rebuild, args) == [None, None, None]  # the retry
    assert sorted(job["jid"] for job in queued(direct)) == sorted(jids)  # type: ignore[type-var]


def test_push_bulk_of_unknown_outcome_keeps_every_claim(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    args = [(1,), (2,), (3,)]
    lose_the_check_too(resp_proxy)
    with pytest.raises(cogworker.PushOutcomeUnknown) as caught:
        cogworker.push_bulk(unique_jobs.rebuild, args)
    assert len(caught.value.jids) == 3
    assert cogworker.push_bulk(unique_jobs.rebuild, args) == [None, None, None]
    assert len(queued(direct)) == 3


def test_push_bulk_that_never_ran_gives_every_claim_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    args = [(1,), (2,), (3,)]
    drop_push(resp_proxy)
    with pytest.raises(redis.ConnectionError):
        cogworker.push_bulk(unique_jobs.rebuild, args)
    assert queued(direct) == []
    assert None not in cogworker.push_bulk(unique_jobs.rebuild, args)
    assert len(queued(direct)) == 3


# C1: a batch member --------------------------------------------------------------------------------


def test_a_member_whose_push_reply_was_lost_stays_in_its_batch(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    with cogworker.batch("lost", **CALLBACKS, callback_args=("x",)) as b:
        lose_push(resp_proxy)
        jid = bj.ok.perform_async("a")
    assert jid is not None and direct.smembers(keys.batch_pending(b.bid)) == {jid}
    assert queued(direct, "callbacks") == []  # nothing decided while the member waits
    Runner(load_settings(redis_url=direct_url(direct))).run_next()
    assert sorted(job["bcb"][1] for job in queued(direct, "callbacks")) == ["complete", "success"]


def test_a_member_of_unknown_outcome_stays_in_its_batch(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    with pytest.raises(cogworker.PushOutcomeUnknown), cogworker.batch("unknown", **CALLBACKS) as b:
        lose_the_check_too(resp_proxy)
        bj.ok.perform_async("a")
    (job,) = queued(direct)
    assert direct.smembers(keys.batch_pending(b.bid)) == {job["jid"]}
    assert queued(direct, "callbacks") == []


def test_members_that_never_ran_leave_their_batch(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    with cogworker.batch("dropped", **CALLBACKS, callback_args=("x",)) as b:
        drop_push(resp_proxy)
        with pytest.raises(redis.ConnectionError):
            bj.ok.perform_async("a")
        resp_proxy.clear()
        drop_push(resp_proxy)
        with pytest.raises(redis.ConnectionError):
            cogworker.push_bulk(bj.ok, [("b",), ("c",)])
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.pending, status.complete) == (0, 0, True)


def direct_url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


# C4: a cancel -------------------------------------------------------------------------------------


def cancelled_count(r: redis.Redis) -> int:
    return int(r.get(keys.stat("cancelled")) or 0)


def test_a_cancel_whose_reply_was_lost_answers_what_it_did(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    jid = bj.ok.perform_async("a")
    assert jid is not None
    rule = resp_proxy.lose_reply(script="cancel", arg="remove")
    outcome = cogworker.cancel(jid)
    assert rule.fired == 1 and (outcome.case, outcome.stopped) == ("queued", True)
    assert queued(direct) == [] and cancelled_count(direct) == 1
    again = cogworker.cancel(jid)  # asked again: the same answer, counted once
    assert (again.case, again.detail) == (outcome.case, outcome.detail)
    assert cancelled_count(direct) == 1


def test_a_cancel_of_unknown_outcome_raises_and_its_retry_answers_what_it_did(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    jid = bj.ok.perform_async("b")
    assert jid is not None
    resp_proxy.lose_reply(script="cancel", arg="remove")
    # The read-back after the lost reply fails too (the first GET is the cancel's opening check).
    resp_proxy.drop_command(command="GET", arg=f"cancelled:{jid}", skip=1)
    with pytest.raises(redis.ConnectionError):
        cogworker.cancel(jid)
    assert queued(direct) == []
    retried = cogworker.cancel(jid)
    assert (retried.case, retried.stopped) == ("queued", True)  # not "not_found"
    assert cancelled_count(direct) == 1


def test_a_cancel_that_never_ran_leaves_the_job_for_its_retry(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    jid = bj.ok.perform_async("c")
    assert jid is not None
    resp_proxy.drop_command(script="cancel", arg="remove")
    with pytest.raises(redis.ConnectionError):
        cogworker.cancel(jid)
    assert [job["jid"] for job in queued(direct)] == [jid] and cancelled_count(direct) == 0
    assert cogworker.cancel(jid).case == "queued"
    assert queued(direct) == [] and cancelled_count(direct) == 1


# A chain's first push ---------------------------------------------------------------------------


def test_a_chain_whose_first_push_is_of_unknown_outcome_keeps_its_record(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    import chain_jobs

    lose_the_check_too(resp_proxy)
    with pytest.raises(cogworker.PushOutcomeUnknown):
        cogworker.chain(chain_jobs.first.s(1), chain_jobs.second.s(2))
    (job,) = queued(direct)
    assert direct.exists(keys.chain(job["chain"]["id"])) == 1  # the queued first step's record stays


def test_a_push_whose_check_stalls_too_is_of_unknown_outcome(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    """Both replies held past COGWORKER_REDIS_TIMEOUT_S (a stalled Redis, as the client sees it):
    the claim stays, and sending the payload again leaves one copy."""
    payload = unique_jobs.rebuild.build((12,), {})
    resp_proxy.delay_reply(30, script="push_batch")
    resp_proxy.delay_reply(30, script="push_check")
    with pytest.raises(cogworker.PushOutcomeUnknown):
        unique_jobs.rebuild.send(payload)
    assert unique_jobs.rebuild.perform_async(12) is None  # the claim held: a duplicate
    assert unique_jobs.rebuild.send(payload) == payload["jid"]
    assert [job["jid"] for job in queued(direct)] == [payload["jid"]]


def test_a_unique_claim_whose_reply_was_lost_is_given_back(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    """The claim ran but its reply was lost, so nothing was pushed: the caller's retry must not be
    skipped as a duplicate of a job that was never queued."""
    resp_proxy.lose_reply(command="SET", arg="cogworker:unique:")
    with pytest.raises(redis.ConnectionError):
        unique_jobs.rebuild.perform_async(13)
    assert queued(direct) == []
    jid = unique_jobs.rebuild.perform_async(13)
    assert jid is not None and [job["jid"] for job in queued(direct)] == [jid]


def test_a_member_whose_registration_reply_was_lost_leaves_its_batch(
    resp_proxy: RespProxy, direct: redis.Redis, through_proxy: Settings
) -> None:
    """Registered, but the reply was lost before the job was written: it leaves the batch, which
    would otherwise wait for it for good."""
    with pytest.raises(redis.ConnectionError), cogworker.batch("registered", **CALLBACKS) as b:
        resp_proxy.lose_reply(script="batch_open", arg="add")
        bj.ok.perform_async("a")
    assert queued(direct) == []
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.pending, status.complete) == (0, 0, True)


def test_a_push_whose_reply_was_lost_with_replicas_wanted_raises_not_replicated(
    resp_proxy: RespProxy, direct: redis.Redis
) -> None:
    """The WAIT rides in the push's round trip, so its answer is lost with the push's: the job is
    written (found by its marker) and no replica is known to hold it."""
    wanted = {"redis_min_replicas": 1, "redis_min_replicas_timeout_s": 0.2}
    cw_client.configure(load_settings(redis_url=resp_proxy.url, redis_timeout_s=1, **wanted))
    lose_push(resp_proxy)
    with pytest.raises(cogworker.NotReplicated) as raised:
        unique_jobs.rebuild.perform_async(8)
    [job] = queued(direct)
    assert raised.value.jids == (job["jid"],)
    assert raised.value.confirmed == 0 and raised.value.wanted == 1
    assert unique_jobs.rebuild.perform_async(8) is None  # written: its claim stands
