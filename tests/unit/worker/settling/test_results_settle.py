"""A job's result when Redis fails as it is written: the job's ack (or its dead filing) is held back
with it and both are done when Redis returns; at shutdown the job stays in progress to run again.
Jobs run in process through `process`, against a real Redis that the test stops."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import result_jobs

from cogworker import codec
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "me:1:results"
ALLOWED = ("result_jobs",)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer(persistent=True)
    try:
        yield srv
    finally:
        srv.close()


def fetched(server: RedisServer, name: str, jid: str, *args: Any, **options: Any) -> Work:
    job = {"class": name, "jid": jid, "queue": "default", "args": list(args), "kwargs": {}, **options}
    raw = codec.dumps(job)
    server.client().lpush(keys.in_progress(ME), raw)
    return Work("default", raw)


def settler_for(server: RedisServer) -> Settler:
    parts = components.build(load_settings(redis_url=server.url))
    return Settler(parts.ctx, keys.in_progress(ME))


def test_a_result_redis_refused_holds_its_ack_until_it_is_written(server: RedisServer) -> None:
    settler = settler_for(server)
    work = fetched(server, "result_jobs.hooked", "h1", "value", result_ttl=30)
    result_jobs.hook = server.stop  # Redis goes away while the job runs
    try:
        process(work, settler, Stats(), allowed=ALLOWED)
    finally:
        result_jobs.hook = None
    # Not acknowledged without its result; held, so a reconcile keeps it on the list.
    assert settler.pending_acks == 0
    assert settler.pending_filings == 1
    assert work.raw in settler.holding()
    server.start()
    settler.retry_pending()
    assert settler.pending_filings == 0
    assert settler.take_acks() == [(work.raw, "h1")]
    r = server.client()
    assert json.loads(r.get(keys.result("h1"))) == {"ok": True, "value": "value"}
    assert 0 < r.pttl(keys.result("h1")) <= 30_000


def test_a_final_error_redis_refused_holds_the_dead_filing_until_it_is_written(server: RedisServer) -> None:
    settler = settler_for(server)
    work = fetched(server, "result_jobs.boom", "b1", "kaput", result_ttl=30, retry=False)
    server.stop()
    process(work, settler, Stats(), allowed=ALLOWED)
    assert settler.pending_filings == 1 and work.raw in settler.holding()
    server.start()
    r = server.client()
    assert r.zcard(keys.DEAD) == 0 and r.llen(keys.in_progress(ME)) == 1
    settler.retry_pending()
    assert settler.pending_filings == 0
    record = json.loads(r.get(keys.result("b1")))
    assert record == {"ok": False, "error_class": "ValueError", "error_message": "kaput"}
    assert [json.loads(e)["jid"] for e in r.zrange(keys.DEAD, 0, -1)] == ["b1"]
    assert r.llen(keys.in_progress(ME)) == 0


def test_a_result_unwritten_at_shutdown_leaves_its_job_in_progress(server: RedisServer) -> None:
    settler = settler_for(server)
    work = fetched(server, "result_jobs.hooked", "h2", "value", result_ttl=30)
    result_jobs.hook = server.stop
    try:
        process(work, settler, Stats(), allowed=ALLOWED)
    finally:
        result_jobs.hook = None
    assert settler.hand_over() == 1
    assert settler.pending_filings == 0 and settler.pending_acks == 0
    server.start()
    r = server.client()
    # Still on the list, never acknowledged: the stop's requeue (or recovery) runs it again.
    assert r.lrange(keys.in_progress(ME), 0, -1) == [work.raw]
    assert r.exists(keys.result("h2")) == 0


def test_a_retried_failure_writes_no_result(server: RedisServer) -> None:
    settler = settler_for(server)
    work = fetched(server, "result_jobs.boom", "b2", "again", result_ttl=30, retry=3)
    process(work, settler, Stats(), allowed=ALLOWED)
    r = server.client()
    assert r.zcard(keys.RETRY) == 1
    assert r.exists(keys.result("b2")) == 0
