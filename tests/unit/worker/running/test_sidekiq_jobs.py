"""Jobs from a Ruby push run by the worker in the Sidekiq mode, against a real Redis: a Sidekiq Pro
`bid` is opaque (the job runs as an ordinary one, no batch key is touched, the field is filed as it
came), `retry: false` discards with its status and batch settled as for a death, and `retry: true`
is the Python job's own option."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import batch_jobs as bj
import pytest
import redis
from structlog.testing import capture_logs

import cogworker
from cogworker import codec, job
from cogworker.api import client as cw_client
from cogworker.api import retry
from cogworker.settings import Settings, load_settings
from cogworker.store import keys, shards
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.processor import Stats, acked_alone, process
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "me:1:sidekiq"
PRO_BID = "kQz2-Vb_9XmA1w"
calls: list[Any] = []


@job(name="SkOkJob", queue="rubyq")
def sk_ok(value: Any) -> None:
    calls.append((value, cogworker.current_batch()))


@job(name="SkFailJob", queue="rubyq", retry=1)
def sk_fail(value: Any) -> None:
    raise ValueError(f"failed {value}")


@job(name="SkPlainFailJob", queue="rubyq")
def sk_plain_fail(value: Any) -> None:
    raise ValueError(f"failed {value}")


@pytest.fixture
def mode(redis_server: RedisServer, r: redis.Redis) -> Iterator[Settings]:
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat="6")
    cw_client.configure(settings)
    shards.use_settings(settings)
    calls.clear()
    yield settings
    shards.use_settings(load_settings())


def ruby_push(r: redis.Redis, name: str, **fields: Any) -> str:
    """A payload as Sidekiq 6.4's client writes it, fetched onto our in-progress list."""
    payload = {
        "retry": True,
        "queue": "rubyq",
        "class": name,
        "args": [1],
        "jid": fields.pop("jid", "a" * 24),
    }
    payload.update(created_at=1_780_000_000.1, enqueued_at=1_780_000_000.2, **fields)
    raw = json.dumps(payload)
    r.lpush(keys.in_progress(ME), raw)
    return raw


def run(settings: Settings, raw: str) -> tuple[Settler, Stats]:
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    stats = Stats()
    process(Work("rubyq", raw), settler, stats, allowed=())
    return settler, stats


def batch_keys(r: redis.Redis) -> list[str]:
    return [k for k in r.keys("*") if "batch" in k]


def test_a_job_with_a_sidekiq_pro_bid_runs_as_an_ordinary_job(r: redis.Redis, mode: Settings) -> None:
    raw = ruby_push(r, "SkOkJob", bid=PRO_BID)
    settler, stats = run(mode, raw)
    assert calls == [(1, None)]  # no batch of cogworker's around it
    assert settler.take_acks() == [(raw, "a" * 24)]  # acknowledged alone, no batch script
    assert stats.processed == 1 and batch_keys(r) == []


def test_a_failed_job_with_a_sidekiq_pro_bid_is_filed_with_its_fields_as_they_came(
    r: redis.Redis, mode: Settings
) -> None:
    fields = {"bid": PRO_BID, "unique_for": 3600, "unique_until": "success", "unique_token": "t"}
    raw = ruby_push(r, "SkPlainFailJob", retry=0, **fields)
    run(mode, raw)
    (dead,) = [json.loads(e) for e in r.zrange("dead", 0, -1)]
    assert {name: dead[name] for name in fields} == fields
    assert "kwargs" not in dead and batch_keys(r) == [] and r.keys("*unique*") == []
    raw = ruby_push(r, "SkPlainFailJob", retry=2, jid="b" * 24, **fields)
    run(mode, raw)
    (retried,) = [json.loads(e) for e in r.zrange("retry", 0, -1)]
    assert {name: retried[name] for name in fields} == fields
    assert "kwargs" not in retried and "at" not in retried and batch_keys(r) == []


def test_retry_false_discards_and_says_so(r: redis.Redis, mode: Settings) -> None:
    raw = ruby_push(r, "SkPlainFailJob", retry=False, status=True)
    with capture_logs() as logs:
        _, stats = run(mode, raw)
    assert [e["to"] for e in logs if e["event"] == "job_discarded"] == ["discarded"]
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0 and r.get("stat:failed") == "1"
    assert stats.failed == 1 and r.llen(keys.DEATHS) == 1
    assert cogworker.status("a" * 24) == "failed"  # its status says it ended


def test_retry_true_from_ruby_is_the_jobs_own_retry_option(r: redis.Redis, mode: Settings) -> None:
    raw = ruby_push(r, "SkFailJob")  # retry: true; the Python job says retry=1
    run(mode, raw)
    (entry,) = r.zrange("retry", 0, -1)
    assert json.loads(entry)["retry"] is True and json.loads(entry)["retry_count"] == 0
    r.delete("retry")
    r.lpush(keys.in_progress(ME), entry)
    run(mode, entry)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 1  # out of its own 1, not Sidekiq's 25


def test_a_discarded_member_of_a_cogworker_batch_counts_as_dead(r: redis.Redis, mode: Settings) -> None:
    with cogworker.batch("discards") as b:
        bj.dies.perform_async("a")  # @job(retry=False)
    raw = r.lmove(keys.queue("default"), keys.in_progress(ME), "RIGHT", "LEFT")
    member = codec.loads(raw)
    assert member["bid"] == b.bid and not acked_alone(member, None)
    settler = Settler(components.build(mode).ctx, keys.in_progress(ME))
    filing = retry.on_failure(member, RuntimeError("boom"))
    assert filing.discarded and settler.file(raw, filing)
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.failed, status.dead) == (1, 1)
    assert r.zcard("dead") == 0
