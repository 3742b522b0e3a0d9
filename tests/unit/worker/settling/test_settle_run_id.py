"""A job missing from its in-progress list was either requeued by orphan recovery (its process was
declared dead: another process runs it, so it is neither filed nor acknowledged here) or lost with
Redis's data (a restart without persistence, a failover to a replica without it: nobody else has
it). Redis's run_id, read on the fetch loop's connection and carried by every fetched job, tells
them apart: settle.lua files a job whose run_id is not the server's, and the reconciler doesn't
disown it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from cogworker import codec
from cogworker.api import payload, retry
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "me:1:runid"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer()  # no persistence: a restart loses every key
    try:
        yield srv
    finally:
        srv.close()


def setup(server: RedisServer) -> tuple[Settler, Reconciler, ReliableFetch]:
    settings = load_settings(redis_url=server.url)
    parts = components.build(settings, identity=ME)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    fetcher = ReliableFetch(parts.client, parts.client, parts.scripts, ME, settings.queue_spec)
    return settler, Reconciler(parts.ctx, settler), fetcher


def fetch_one(server: RedisServer, fetcher: ReliableFetch, tag: str) -> Work:
    raw = codec.dumps(payload.build("demo_jobs.record", [tag], {}, queue="default", retry=True))
    server.client().lpush(keys.queue("default"), raw)
    [work] = fetcher.fetch(1, []).works
    assert work.run_id == server.client().info("server")["run_id"]
    return work


def failing(work: Work) -> retry.Filing:
    return retry.on_failure(codec.loads(work.raw), ValueError("x"))


def test_a_job_requeued_from_the_same_redis_is_not_filed_one_it_lost_is(server: RedisServer) -> None:
    settler, _, fetcher = setup(server)
    requeued = fetch_one(server, fetcher, "requeued")
    server.client().delete(keys.in_progress(ME))  # what recovery does to a process declared dead
    settler.file(requeued.raw, failing(requeued), requeued.run_id)
    assert server.client().zcard(keys.RETRY) == 0  # another process runs it: a filing is a third run

    lost = fetch_one(server, fetcher, "lost")
    server.restart()
    with capture_logs() as events:
        assert settler.file(lost.raw, failing(lost), lost.run_id) is True
    [entry] = [json.loads(e) for e in server.client().zrange(keys.RETRY, 0, -1)]
    assert entry["args"] == ["lost"] and server.client().get(keys.STAT_FAILED) == "1"
    assert [e["event"] for e in events if e["event"] == "job_filed_after_redis_lost_it"] == [
        "job_filed_after_redis_lost_it"
    ]


def test_a_job_of_unknown_run_id_missing_from_the_list_is_not_filed(server: RedisServer) -> None:
    """INFO refused (an ACL), or a job fetched through the pool: nothing to compare, as before."""
    settler, _, fetcher = setup(server)
    work = fetch_one(server, fetcher, "unknown")
    server.restart()
    settler.file(work.raw, failing(work), "")
    assert server.client().zcard(keys.RETRY) == 0


def test_the_reconciler_disowns_requeued_jobs_but_not_those_redis_lost(server: RedisServer) -> None:
    settler, reconciler, fetcher = setup(server)
    before = fetch_one(server, fetcher, "before")
    reconciler.hold([before])
    server.restart()
    after = fetch_one(server, fetcher, "after")  # fetched from the new server...
    reconciler.hold([after])
    server.client().delete(keys.in_progress(ME))  # ... and requeued by recovery
    reconciler.lost_reply()
    with capture_logs() as events:
        reconciler.run_if_due(fetcher)
    assert settler.disowned == 1  # "after" only: its settle here is skipped
    [lost] = [e for e in events if e["event"] == "held_jobs_lost_with_redis_data"]
    assert lost["count"] == 1
    settler.file(before.raw, failing(before), before.run_id)
    settler.file(after.raw, failing(after), after.run_id)
    [entry] = [json.loads(e) for e in server.client().zrange(keys.RETRY, 0, -1)]
    assert entry["args"] == ["before"]
