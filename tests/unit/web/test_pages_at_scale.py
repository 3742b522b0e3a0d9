"""Every Web UI page that reads a slice costs the same at 1,000 and at 20,000 entries per set (and as
many jobs in one queue): the same Redis commands, and the same bytes read from Redis give or take a
counter's digits. A page that read a whole set, a whole queue or a SCAN of the keyspace would read
twenty times more at the larger size. `make bench --only webscale` times the same pages at a million.

The pages that search (a filter, the header search, the job page, the Groups counts, the batch
pages' search of the retry set) read up to a time budget instead; their budgets are tested with
their own modules."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.ops import audit as audit_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.web import create_app
from tests.support.set_entries import dead_job, job

SMALL, BIG = 1_000, 20_000
QUEUE = "bulk"
T0 = 1_764_500_000.0
# Bytes of a reply that differ between two reads of the same page: the INFO text of the dashboard's
# vitals (memory, uptime), whose numbers grow a digit; a page reading a whole set at BIG would read
# megabytes more.
SLACK_BYTES = 2_000

PAGES = [
    "/",
    "/?days=180",
    "/busy",
    "/queues",
    f"/queues/{QUEUE}",
    f"/queues/{QUEUE}?page=30",
    f"/queues/{QUEUE}?order=next&page=30",
    "/retries",
    "/retries?page=30",
    "/retries?order=desc",
    "/scheduled?page=30",
    "/dead",
    "/dead?page=30",
    "/dead?order=asc",
    f"/dead/{set_ops.entry_key(T0 + 700, 'j000700')}",
    "/periodic",
    "/batches",
    "/actions",
    "/metrics",
]


def fill(r: redis.Redis, first: int, last: int) -> None:
    """Entries first..last-1 in each set and in the queue: jids of one width, so payloads of one
    size at either fill."""
    pipe = r.pipeline(transaction=False)
    for i in range(first, last):
        jid = f"j{i:06d}"
        pipe.zadd(keys.DEAD, {codec.dumps(dead_job(jid)): T0 + i})
        pipe.zadd(keys.RETRY, {codec.dumps(dead_job(jid, queue="default")): T0 + i})
        pipe.zadd(keys.SCHEDULE, {codec.dumps(job(jid)): T0 + i})
        pipe.lpush(keys.queue(QUEUE), codec.dumps(job(jid, queue=QUEUE, enqueued_at=T0 + i)))
        if i % 1000 == 999:
            pipe.execute()
    pipe.sadd(keys.QUEUES, QUEUE)
    pipe.execute()


def cost(client: TestClient, r: redis.Redis, path: str) -> tuple[int, int]:
    """(commands, bytes Redis sent) for one request of `path`, after one that warms it up."""
    assert client.get(path).status_code == 200
    before = _counters(r)
    assert client.get(path).status_code == 200
    after = _counters(r)
    return after[0] - before[0], after[1] - before[1]


def _counters(r: redis.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = r.info("commandstats")
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return calls, int(r.info("stats")["total_net_output_bytes"])


def test_no_page_that_reads_a_slice_costs_more_at_20_times_the_entries(
    settings: Settings, r: redis.Redis
) -> None:
    for n in range(20):
        record = audit_ops.AuditRecord(T0 + n, "ops", "/dead/retry", f"retried {n}", "ok", None)
        audit_ops.record(r, record)
    client = TestClient(create_app(settings))
    fill(r, 0, SMALL)
    small = {path: cost(client, r, path) for path in PAGES}
    fill(r, SMALL, BIG)
    assert r.zcard(keys.DEAD) == r.llen(keys.queue(QUEUE)) == BIG
    big = {path: cost(client, r, path) for path in PAGES}
    more_commands = {p: (small[p][0], big[p][0]) for p in PAGES if big[p][0] != small[p][0]}
    more_bytes = {p: (small[p][1], big[p][1]) for p in PAGES if big[p][1] - small[p][1] > SLACK_BYTES}
    assert more_commands == {} and more_bytes == {}


@pytest.mark.parametrize("path", ["/dead?page=30", f"/queues/{QUEUE}?order=next&page=30"])
def test_the_counters_see_a_page_that_reads_everything(
    settings: Settings, r: redis.Redis, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measure above can fail: the same page made to read the whole set or queue costs its
    size in bytes."""
    client = TestClient(create_app(settings))
    fill(r, 0, SMALL)
    small = cost(client, r, path)
    fill(r, SMALL, 4 * SMALL)
    whole_set = set_ops.page
    whole_queue = queue_ops.jobs_page
    monkeypatch.setattr(
        set_ops, "page", lambda c, s, start, count, desc=True: whole_set(c, s, 0, 10**9, desc)
    )
    monkeypatch.setattr(
        queue_ops, "jobs_page", lambda c, n, start, count, next_first=False: whole_queue(c, n, 0, 10**9)
    )
    big = cost(client, r, path)
    assert big[1] - small[1] > 100 * SLACK_BYTES
