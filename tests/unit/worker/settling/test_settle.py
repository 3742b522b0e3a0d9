"""Settling when Redis fails: filings kept and retried, handed over at shutdown, filed by another
process; unusable handed-over records quarantined without blocking what is behind them."""

from __future__ import annotations

import json

import pytest

from cogworker import codec
from cogworker.api import retry
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.worker.settling.settle import Settler, file_unsettled
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "me:1:x"


@pytest.fixture
def server():
    srv = RedisServer(persistent=True)
    try:
        yield srv
    finally:
        srv.close()


def fetched(r, jid: str) -> str:
    raw = codec.dumps({"class": "demo_jobs.boom", "jid": jid, "queue": "default", "args": ["x"], "retry": 0})
    r.lpush(keys.in_progress(ME), raw)
    return raw


def make_settler(parts, settings) -> Settler:
    return Settler(parts.ctx, keys.in_progress(ME))


def test_a_failed_filing_is_kept_and_filed_when_redis_returns(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    settler = make_settler(parts, settings)
    raw = fetched(server.client(), "a")
    server.stop()
    assert settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("x"))) is False
    assert settler.pending_filings == 1
    server.start()
    settler.retry_pending()
    r = server.client()
    assert settler.pending_filings == 0
    assert [json.loads(e)["jid"] for e in r.zrange(keys.DEAD, 0, -1)] == ["a"]
    assert r.llen(keys.in_progress(ME)) == 0


def test_handover_then_another_process_files_it(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    settler = make_settler(parts, settings)
    r = server.client()
    raw = fetched(r, "b")
    r.set(keys.DEAD, "wrong type for a moment")  # filing fails for a reason other than an outage
    assert settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("x"))) is False
    assert settler.hand_over() == 0
    # Handed over: off our in-progress list (so not requeued too), onto cogworker:unsettled.
    assert r.llen(keys.in_progress(ME)) == 0
    assert r.llen(keys.UNSETTLED) == 1
    r.delete(keys.DEAD)
    other = components.build(settings, identity="other:2:y")
    assert file_unsettled(other.client, other.scripts, settings, other.locks) == 1
    assert r.llen(keys.UNSETTLED) == 0
    assert [json.loads(e)["jid"] for e in r.zrange(keys.DEAD, 0, -1)] == ["b"]


def test_handover_with_redis_gone_leaves_the_job_in_progress(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    settler = make_settler(parts, settings)
    raw = fetched(server.client(), "c")
    server.stop()
    settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("x")))
    assert settler.hand_over() == 1
    server.start()
    # Still on the in-progress list: recovery will run it again rather than lose it.
    assert server.client().lrange(keys.in_progress(ME), 0, -1) == [raw]


def test_unusable_unsettled_records_are_quarantined_not_blocking(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    r = server.client()
    good = codec.dumps({"set": keys.RETRY, "score": 1, "payload": {"jid": "ok", "class": "x", "queue": "q"}})
    r.rpush(
        keys.UNSETTLED,
        "garbage",
        codec.dumps({"set": "cogworker:queue:default", "score": 1, "payload": {}}),
        good,
    )
    assert file_unsettled(parts.client, parts.scripts, settings, parts.locks) == 1
    assert r.llen(keys.UNSETTLED) == 0
    assert [json.loads(e)["jid"] for e in r.zrange(keys.RETRY, 0, -1)] == ["ok"]
    quarantined = r.keys("cogworker:quarantine:unsettled:*")
    assert "garbage" in {r.get(k) for k in quarantined} and len(quarantined) == 2
    assert all(r.ttl(k) > 0 for k in quarantined)


def test_a_failed_lock_release_is_retried_later(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    r = server.client()
    r.set("cogworker:unique:abc", "jid-1")
    server.stop()
    assert parts.locks.release("cogworker:unique:abc", "jid-1") is False
    assert parts.locks.deferred == 1
    server.start()
    assert parts.locks.retry_deferred() == 1
    assert server.client().exists("cogworker:unique:abc") == 0


def unencodable_filing(raw: str) -> retry.Filing:
    """A failure orjson can't write: a lone surrogate in its message, args nested 300 deep."""
    job = codec.loads(raw)
    job["args"] = codec.loads("[" * 300 + "]" * 300)
    filing = retry.on_failure(job, ValueError("x"))
    return retry.Filing(filing.set_key, filing.score, {**filing.payload, "error_message": "bad \ud800"})


def test_an_unencodable_filing_is_filed_sanitised_not_kept_as_an_outage(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    settler = make_settler(parts, settings)
    r = server.client()
    raw = fetched(r, "deep")
    assert settler.file(raw, unencodable_filing(raw)) is True
    assert settler.pending_filings == 0 and not parts.outages.down
    assert r.llen(keys.in_progress(ME)) == 0
    [entry] = [json.loads(e) for e in r.zrange(keys.DEAD, 0, -1)]  # its args changed: dead, not retry
    assert entry["jid"] == "deep" and entry["raw"] == raw
    assert entry["error_message"] == "bad \\ud800"
    assert any("nested deeper" in note for note in entry["cogworker_notes"])


def test_hand_over_of_an_unencodable_filing_kept_through_an_outage(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    settler = make_settler(parts, settings)
    raw = fetched(server.client(), "deep")
    server.stop()
    assert settler.file(raw, unencodable_filing(raw)) is False  # Redis away: kept
    server.start()
    assert settler.hand_over() == 0  # used to raise outside its try, leaving the process half-stopped
    r = server.client()
    assert r.llen(keys.in_progress(ME)) == 0 and r.llen(keys.UNSETTLED) == 1
    other = components.build(settings, identity="other:2:y")
    assert file_unsettled(other.client, other.scripts, settings, other.locks) == 1
    assert [json.loads(e)["jid"] for e in r.zrange(keys.DEAD, 0, -1)] == ["deep"]


def test_a_handed_over_record_json_cant_rewrite_is_quarantined_not_blocking(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    r = server.client()
    deep = '{"set":"cogworker:retry","score":1,"payload":{"jid":"d","args":%s}}' % ("[" * 300 + "]" * 300)
    good = codec.dumps({"set": keys.RETRY, "score": 1, "payload": {"jid": "ok", "class": "x", "queue": "q"}})
    r.rpush(keys.UNSETTLED, deep, good)
    assert file_unsettled(parts.client, parts.scripts, settings, parts.locks) == 1
    assert [json.loads(e)["jid"] for e in r.zrange(keys.RETRY, 0, -1)] == ["ok"]
    assert deep in {r.get(k) for k in r.keys("cogworker:quarantine:unsettled:*")}


def test_the_poller_buries_a_due_entry_json_cant_rewrite_and_moves_the_rest(server: RedisServer) -> None:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings)
    r = server.client()
    deep = '{"class":"x","queue":"default","jid":"d","args":%s}' % ("[" * 300 + "]" * 300)
    good = codec.dumps({"class": "x", "queue": "default", "jid": "ok", "args": []})
    r.zadd(keys.RETRY, {deep: 1, good: 2})
    parts.poller.enqueue_due()
    assert [json.loads(e)["jid"] for e in r.lrange(keys.queue("default"), 0, -1)] == ["ok"]
    [entry] = [json.loads(e) for e in r.zrange(keys.DEAD, 0, -1)]
    assert entry["raw"] == deep
    assert r.zcard(keys.RETRY) == 0
