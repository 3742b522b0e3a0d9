"""Settling when a reply is lost (Redis ran the command, the client gave up waiting: the server is
SIGSTOPped past COGWORKER_REDIS_TIMEOUT_S, and runs what sat in its socket once resumed) and when the
command never ran (the server is down): a dead filing sent again releases the job's locks, a
handover sent again says that it happened, the stop's acknowledgements are sent again until the
deadline, and each log line says what Redis holds."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from cogworker import codec
from cogworker.api import retry
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.store.locks import unique_digest
from cogworker.store.scripts import source
from cogworker.worker.handover import flush_acks
from cogworker.worker.reliable_fetch import ReliableFetch
from cogworker.worker.settle import Settler
from tests.support import components
from tests.support.redis_server import RedisServer, wait_until

ME = "me:1:lost"
TIMEOUT_S = 0.5  # COGWORKER_REDIS_TIMEOUT_S: how long a call waits for a reply


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(persistent=True)  # a stop and start keeps every key
    try:
        yield srv
    finally:
        srv.close()


def settler_for(server: RedisServer) -> tuple[Settler, components.Parts]:
    parts = components.build(load_settings(redis_url=server.url, redis_timeout_s=TIMEOUT_S), identity=ME)
    # Loaded now: an EVALSHA that reached a stopped server before its script would be refused later.
    client = server.client()
    for name in ("settle", "handover", "fetch", "owned_delete"):
        client.script_load(source(name))
    # Connected now: a connection made to a stopped server times out in its handshake, before the
    # command is sent, which is not the lost reply these tests are about.
    parts.client.ping()
    return Settler(parts.ctx, keys.in_progress(ME)), parts


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


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def logged(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == name]


def test_a_dead_filing_whose_reply_was_lost_releases_its_unique_claim_when_sent_again(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server)
    r = server.client()
    raw, claim = fetched_unique(r, "lost")
    server.pause()
    try:
        assert settler.file(raw, dead_filing(raw)) is False  # no reply: kept, to be sent again
    finally:
        server.resume()
    wait_until(lambda: r.zcard(keys.DEAD) == 1, message="the filing the server ran once resumed")
    assert r.get(claim) == "lost"  # the client never learnt that the job was filed

    settler.retry_pending()
    assert settler.pending_filings == 0
    assert r.exists(claim) == 0  # released now, not at its TTL
    assert r.zcard(keys.DEAD) == 1 and r.get(keys.STAT_FAILED) == "1"  # filed and counted once
    assert r.llen(keys.DEATHS) == 1


def test_a_dead_filing_that_never_reached_redis_is_filed_and_releases_its_claim(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server)
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


def kept_filing(server: RedisServer, settler: Settler, jid: str) -> str:
    """A failed job whose filing is kept (a wrong-type key stopped it), for the handover."""
    r = server.client()
    raw, _claim = fetched_unique(r, jid)
    r.set(keys.DEAD, "wrong type for a moment")
    assert settler.file(raw, dead_filing(raw)) is False
    r.delete(keys.DEAD)
    return raw


def test_a_handover_whose_reply_is_lost_is_sent_again_and_said_to_have_happened(server: RedisServer) -> None:
    settler, _ = settler_for(server)
    r = server.client()
    kept_filing(server, settler, "handed")
    with capture_logs() as events:
        server.pause()
        try:
            thread, result = in_thread(lambda: settler.hand_over(time.monotonic() + 60))
            wait_until(lambda: logged(events, "handover_unanswered"), message="the first try to time out")
        finally:
            server.resume()
        thread.join(timeout=60)
    assert result == [0]  # every filing known to be handed over
    assert logged(events, "handover_confirmed_after_lost_reply")
    assert not logged(events, "unsettled_jobs_left_in_progress")
    assert not logged(events, "handover_outcome_unknown")
    [record] = r.lrange(keys.UNSETTLED, 0, -1)  # once, though sent twice
    assert json.loads(record)["payload"]["jid"] == "handed"
    assert r.llen(keys.in_progress(ME)) == 0


def test_a_handover_still_unanswered_at_the_deadline_is_logged_as_unknown_not_as_run_again(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server)
    r = server.client()
    kept_filing(server, settler, "unknown")
    with capture_logs() as events:
        server.pause()
        try:
            assert settler.hand_over(time.monotonic()) == 1  # one try, unanswered
        finally:
            server.resume()
    # It did happen: the job is off the list and will not run again, as the log used to say.
    wait_until(lambda: r.llen(keys.UNSETTLED) == 1, message="the handover the server ran once resumed")
    assert r.llen(keys.in_progress(ME)) == 0
    assert [e["count"] for e in logged(events, "handover_outcome_unknown")] == [1]
    assert not logged(events, "unsettled_jobs_left_in_progress")


def test_a_handover_that_never_reached_redis_is_made_once_it_is_back_before_the_deadline(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server)
    raw = kept_filing(server, settler, "later")
    with capture_logs() as events:
        server.stop()
        thread, result = in_thread(lambda: settler.hand_over(time.monotonic() + 60))
        wait_until(lambda: logged(events, "handover_unanswered"), message="the first try to fail")
        server.start()
        thread.join(timeout=60)
    r = server.client()
    assert result == [0] and not logged(events, "handover_confirmed_after_lost_reply")
    assert r.llen(keys.UNSETTLED) == 1 and r.lrange(keys.in_progress(ME), 0, -1) == []
    assert raw not in r.lrange(keys.in_progress(ME), 0, -1)


def test_a_handover_refused_until_the_deadline_leaves_the_job_in_progress_and_says_so(
    server: RedisServer,
) -> None:
    settler, _ = settler_for(server)
    raw = kept_filing(server, settler, "refused")
    with capture_logs() as events:
        server.stop()
        assert settler.hand_over(time.monotonic()) == 1
    assert [e["count"] for e in logged(events, "unsettled_jobs_left_in_progress")] == [1]
    assert not logged(events, "handover_outcome_unknown")
    server.start()
    r = server.client()
    assert r.lrange(keys.in_progress(ME), 0, -1) == [raw] and r.llen(keys.UNSETTLED) == 0


def fetch_for(parts: components.Parts, server: RedisServer) -> ReliableFetch:
    settings = load_settings(redis_url=server.url, redis_timeout_s=TIMEOUT_S)
    fetcher = ReliableFetch(parts.client, parts.client, parts.scripts, ME, settings.queue_spec)
    fetcher.fetch(0, [])  # its connection made (settler_for says why)
    return fetcher


def test_final_acks_whose_reply_is_lost_are_sent_again_and_counted_once(server: RedisServer) -> None:
    settler, parts = settler_for(server)
    fetcher = fetch_for(parts, server)
    r = server.client()
    raws = [codec.dumps({"class": "demo_jobs.record", "jid": f"j{i}", "queue": "default"}) for i in range(3)]
    r.lpush(keys.in_progress(ME), *raws)
    for i, raw in enumerate(raws):
        settler.ack(raw, f"j{i}")
    with capture_logs() as events:
        server.pause()
        try:
            thread, result = in_thread(lambda: flush_acks(fetcher, settler, time.monotonic() + 60))
            wait_until(lambda: logged(events, "final_acks_unanswered"), message="the first try to time out")
        finally:
            server.resume()
        thread.join(timeout=60)
    assert result == [0] and settler.pending_acks == 0
    assert r.llen(keys.in_progress(ME)) == 0 and r.get(keys.STAT_PROCESSED) == "3"
    assert not logged(events, "acks_unsent_jobs_left_in_progress")


def test_final_acks_redis_never_takes_by_the_deadline_are_named(server: RedisServer) -> None:
    settler, parts = settler_for(server)
    fetcher = fetch_for(parts, server)
    raw = codec.dumps({"class": "demo_jobs.record", "jid": "j", "queue": "default"})
    server.client().lpush(keys.in_progress(ME), raw)
    settler.ack(raw, "j")
    with capture_logs() as events:
        server.stop()
        assert flush_acks(fetcher, settler, time.monotonic()) == 1
    assert [e["count"] for e in logged(events, "acks_unsent_jobs_left_in_progress")] == [1]
    server.start()
    assert server.client().lrange(keys.in_progress(ME), 0, -1) == [raw]  # it runs again: as logged
