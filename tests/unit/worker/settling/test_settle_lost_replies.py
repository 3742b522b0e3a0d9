"""Settling when a reply is lost (the command ran; the fault proxy, tests/support/resp_proxy.py,
threw its reply away and closed the connection), when the command was dropped unsent, and when
Redis is down: a dead filing sent again releases the job's locks, a handover sent again says that it
happened, the stop's acknowledgements are sent again until the deadline, each is written once, and
each log line says what Redis holds."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from cogworker import codec
from cogworker.api import retry
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.store.locks import unique_digest
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.settling.handover import flush_acks
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy

ME = "me:1:lost"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(persistent=True)  # a stop and start keeps every key
    try:
        yield srv
    finally:
        srv.close()


def settler_for(url: str) -> tuple[Settler, components.Parts]:
    parts = components.build(load_settings(redis_url=url, redis_timeout_s=2), identity=ME)
    return Settler(parts.ctx, keys.in_progress(ME)), parts


def fetcher_for(parts: components.Parts, url: str) -> ReliableFetch:
    settings = load_settings(redis_url=url)
    return ReliableFetch(parts.client, parts.client, parts.scripts, ME, settings.queue_spec)


def fetched_unique(r: redis.Redis, jid: str) -> tuple[str, str]:
    """A unique job on our in-progress list, holding its claim; (payload, claim key)."""
    job = {"class": "demo_jobs.boom", "jid": jid, "queue": "default", "args": [jid], "retry": 0}
    job["unique"] = "until_executed"
    raw = codec.dumps(job)
    claim = keys.unique(unique_digest(job))
    r.set(claim, jid)
    r.lpush(keys.in_progress(ME), raw)
    return raw, claim


def dead_filing(raw: str) -> retry.Filing:
    filing = retry.on_failure(codec.loads(raw), ValueError("x"))
    assert filing.dead
    return filing


def kept_filing(r: redis.Redis, settler: Settler, jid: str) -> str:
    """A failed job whose filing is kept (a wrong-type key stopped it), for the handover."""
    raw, _claim = fetched_unique(r, jid)
    r.set(keys.DEAD, "wrong type for a moment")
    assert settler.file(raw, dead_filing(raw)) is False
    r.delete(keys.DEAD)
    return raw


def finished(r: redis.Redis, settler: Settler, count: int) -> None:
    """`count` finished jobs on our list, their acknowledgements held by the settler."""
    for i in range(count):
        raw = codec.dumps({"class": "demo_jobs.record", "jid": f"j{i}", "queue": "default"})
        r.lpush(keys.in_progress(ME), raw)
        settler.ack(raw, f"j{i}")


def logged(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == name]


# Filings ---------------------------------------------------------------------------------------


def test_a_dead_filing_whose_reply_was_lost_releases_its_unique_claim_when_sent_again(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    raw, claim = fetched_unique(r, "lost")
    rule = resp_proxy.lose_reply(script="settle")
    assert settler.file(raw, dead_filing(raw)) is False  # no reply: kept, to be sent again
    assert rule.fired == 1 and r.zcard(keys.DEAD) == 1  # it ran
    assert r.get(claim) == "lost"  # ... but the client never learnt it

    settler.retry_pending()
    assert settler.pending_filings == 0
    assert r.exists(claim) == 0  # released now, not at its TTL
    assert r.zcard(keys.DEAD) == 1 and r.get(keys.STAT_FAILED) == "1" and r.llen(keys.DEATHS) == 1


def test_with_basic_fetch_a_filing_whose_reply_was_lost_is_written_and_counted_once(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    """Basic fetch keeps no list to gate a second call on: the entry the first one wrote is the gate."""
    settler, _ = settler_for(resp_proxy.url)
    settler.use_basic_fetch()
    r = private_redis.client()
    raw, claim = fetched_unique(r, "basic")
    r.delete(keys.in_progress(ME))  # popped by BRPOP: on no list
    resp_proxy.lose_reply(script="settle")
    assert settler.file(raw, dead_filing(raw)) is False
    settler.retry_pending()
    assert settler.pending_filings == 0 and r.exists(claim) == 0
    assert r.zcard(keys.DEAD) == 1 and r.get(keys.STAT_FAILED) == "1" and r.llen(keys.DEATHS) == 1


def test_a_dead_filing_dropped_unsent_is_filed_when_sent_again_and_releases_its_claim(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    raw, claim = fetched_unique(r, "dropped")
    rule = resp_proxy.drop_command(script="settle")
    assert settler.file(raw, dead_filing(raw)) is False
    assert rule.fired == 1 and r.zcard(keys.DEAD) == 0 and r.get(claim) == "dropped"
    settler.retry_pending()
    assert settler.pending_filings == 0 and r.exists(claim) == 0
    assert r.zcard(keys.DEAD) == 1 and r.get(keys.STAT_FAILED) == "1" and r.llen(keys.in_progress(ME)) == 0


def test_a_dead_filing_redis_refused_while_down_is_filed_and_releases_its_claim(server: RedisServer) -> None:
    settler, _ = settler_for(server.url)
    r = server.client()
    raw, claim = fetched_unique(r, "refused")
    server.stop()
    assert settler.file(raw, dead_filing(raw)) is False
    server.start()
    r = server.client()
    assert r.zcard(keys.DEAD) == 0 and r.get(claim) == "refused"
    settler.retry_pending()
    assert settler.pending_filings == 0 and r.exists(claim) == 0
    assert r.zcard(keys.DEAD) == 1 and r.get(keys.STAT_FAILED) == "1" and r.llen(keys.in_progress(ME)) == 0


# Handovers -------------------------------------------------------------------------------------


def test_a_handover_whose_reply_is_lost_is_sent_again_and_said_to_have_happened(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    kept_filing(r, settler, "handed")
    rule = resp_proxy.lose_reply(script="handover")
    with capture_logs() as events:
        assert settler.hand_over(time.monotonic() + 30) == 0  # every filing known to be handed over
    assert rule.fired == 1
    assert logged(events, "handover_confirmed_after_lost_reply")
    assert not logged(events, "unsettled_jobs_left_in_progress") and not logged(
        events, "handover_outcome_unknown"
    )
    [record] = r.lrange(keys.UNSETTLED, 0, -1)  # once, though sent twice
    assert json.loads(record)["payload"]["jid"] == "handed"
    assert r.llen(keys.in_progress(ME)) == 0


def test_a_filing_whose_reply_was_lost_is_found_made_at_the_handover_and_its_claim_released(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    raw, claim = fetched_unique(r, "made")
    resp_proxy.lose_reply(script="settle")
    assert settler.file(raw, dead_filing(raw)) is False  # it ran: filed, off the list
    with capture_logs() as events:
        assert settler.hand_over(time.monotonic() + 30) == 0
    assert logged(events, "handover_not_needed_filed_before")
    assert not logged(events, "handover_skipped_requeued_job")  # it was not requeued anywhere
    assert r.llen(keys.UNSETTLED) == 0 and r.zcard(keys.DEAD) == 1 and r.exists(claim) == 0


def test_a_handover_unanswered_at_the_deadline_is_logged_as_unknown_not_as_run_again(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    kept_filing(r, settler, "unknown")
    resp_proxy.lose_reply(script="handover")
    with capture_logs() as events:
        assert settler.hand_over(time.monotonic()) == 1  # one try, its reply lost
    # It did happen: the job is off the list, so it will not run again from there.
    assert r.llen(keys.UNSETTLED) == 1 and r.llen(keys.in_progress(ME)) == 0
    assert [e["count"] for e in logged(events, "handover_outcome_unknown")] == [1]
    assert not logged(events, "unsettled_jobs_left_in_progress")


def test_a_handover_dropped_unsent_is_made_by_the_next_try(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler, _ = settler_for(resp_proxy.url)
    r = private_redis.client()
    kept_filing(r, settler, "later")
    rule = resp_proxy.drop_command(script="handover")
    with capture_logs() as events:
        assert settler.hand_over(time.monotonic() + 30) == 0
    assert rule.fired == 1 and not logged(events, "handover_confirmed_after_lost_reply")
    assert r.llen(keys.UNSETTLED) == 1 and r.llen(keys.in_progress(ME)) == 0


def test_a_handover_refused_until_the_deadline_leaves_the_job_in_progress_and_says_so(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server.url)
    raw = kept_filing(server.client(), settler, "refused")
    with capture_logs() as events:
        server.stop()
        assert settler.hand_over(time.monotonic()) == 1
    assert [e["count"] for e in logged(events, "unsettled_jobs_left_in_progress")] == [1]
    assert not logged(events, "handover_outcome_unknown")
    server.start()
    r = server.client()
    assert r.lrange(keys.in_progress(ME), 0, -1) == [raw] and r.llen(keys.UNSETTLED) == 0


# The stop's acknowledgements -------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["lose_reply", "drop_command"])
def test_final_acks_lost_or_dropped_are_sent_again_and_counted_once(
    resp_proxy: RespProxy, private_redis: RedisServer, fault: str
) -> None:
    settler, parts = settler_for(resp_proxy.url)
    fetcher = fetcher_for(parts, resp_proxy.url)
    r = private_redis.client()
    finished(r, settler, 3)
    rule = getattr(resp_proxy, fault)(script="fetch")
    with capture_logs() as events:
        assert flush_acks(fetcher, settler, time.monotonic() + 30) == 0
    assert rule.fired == 1 and [e["count"] for e in logged(events, "final_acks_unanswered")] == [3]
    assert settler.pending_acks == 0 and r.llen(keys.in_progress(ME)) == 0
    assert r.get(keys.STAT_PROCESSED) == "3"  # counted once, though a lost reply's try ran
    assert not logged(events, "acks_unsent_jobs_left_in_progress")


def test_final_acks_redis_never_takes_by_the_deadline_are_named(server: RedisServer) -> None:
    settler, parts = settler_for(server.url)
    fetcher = fetcher_for(parts, server.url)
    finished(server.client(), settler, 1)
    with capture_logs() as events:
        server.stop()
        assert flush_acks(fetcher, settler, time.monotonic()) == 1
    assert [e["count"] for e in logged(events, "acks_unsent_jobs_left_in_progress")] == [1]
    server.start()
    assert server.client().llen(keys.in_progress(ME)) == 1  # it runs again: as logged
