"""A discarded job in the Sidekiq mode (`retry: false`, or `dead: false` out of retries) against a real
Redis: taken off the in-progress list, counted failed, its death notice pushed for the hooks, its locks
released, and no dead entry; filed once however its reply was lost, and filed by another process when a
stopping one handed it over."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.api import death, retry, sidekiq_payload
from cogworker.settings import Settings, load_settings
from cogworker.store import keys, shards
from cogworker.store.locks import unique_digest
from cogworker.worker.running.death_hooks import DeathHookRunner
from cogworker.worker.settling.settle import Settler, file_unsettled
from tests.support import components
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy

ME = "me:1:discard"


def mode_settings(url: str, **more: Any) -> Settings:
    settings = load_settings(redis_url=url, sidekiq_compat="6", redis_timeout_s=2, **more)
    shards.use_settings(settings)
    return settings


@pytest.fixture(autouse=True)
def _mode_off_after() -> Iterator[None]:
    yield
    shards.use_settings(load_settings())


def fetched(r: redis.Redis, jid: str, **fields: Any) -> tuple[str, str]:
    """A unique job with `retry: false` on our in-progress list, holding its claim; (payload, claim)."""
    job = {"class": "HardJob", "jid": jid, "queue": "default", "args": [jid], "retry": False, **fields}
    job["unique"] = "until_executed"
    raw = codec.dumps(job)
    claim = keys.unique(unique_digest(job))
    r.set(claim, jid)
    r.lpush(keys.in_progress(ME), raw)
    return raw, claim


def discarded(raw: str) -> retry.Filing:
    filing = retry.on_failure(codec.loads(raw), ValueError("no"))
    assert filing.discarded
    return filing


def assert_discarded_once(r: redis.Redis, claim: str, jid: str, failed: str | None = "1") -> None:
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    assert r.llen(keys.in_progress(ME)) == 0
    assert r.get("stat:failed") == failed and r.get(f"stat:failed:{day}") == failed
    assert r.exists(claim) == 0  # released with the end, not left to its TTL
    (notice,) = [json.loads(text) for text in r.lrange(keys.DEATHS, 0, -1)]
    assert notice["cause"] == death.FAILED and notice["job"]["jid"] == jid
    # The mark a filing sent again finds: cogworker's own key, trimmed, never Sidekiq's dead set.
    assert r.zcard(sidekiq_payload.discarded_key()) == 1
    assert sidekiq_payload.discarded_key().startswith(keys.PREFIX)


def test_a_discarded_job_is_counted_and_noticed_and_never_dead(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    settings = mode_settings(redis_server.url)
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    raw, claim = fetched(r, "gone")
    assert settler.file(raw, discarded(raw))
    assert_discarded_once(r, claim, "gone")
    # Filed once: a second settle of the same job (recovery took it) writes nothing more.
    settler.file(raw, discarded(raw))
    assert r.get("stat:failed") == "1" and r.llen(keys.DEATHS) == 1


def test_the_discarded_set_is_trimmed(r: redis.Redis, redis_server: RedisServer, monkeypatch: Any) -> None:
    monkeypatch.setattr(sidekiq_payload, "DISCARD_KEEP", 2)
    settler = Settler(components.build(mode_settings(redis_server.url)).ctx, keys.in_progress(ME))
    for jid in ("a", "b", "c"):
        raw, _ = fetched(r, jid)
        settler.file(raw, discarded(raw))
    assert r.zcard(sidekiq_payload.discarded_key()) == 2 and r.get("stat:failed") == "3"


def test_a_discard_whose_reply_was_lost_is_made_once_and_releases_its_claim(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler = Settler(components.build(mode_settings(resp_proxy.url), identity=ME).ctx, keys.in_progress(ME))
    r = private_redis.client()
    raw, claim = fetched(r, "lost")
    rule = resp_proxy.lose_reply(script="settle")
    assert settler.file(raw, discarded(raw)) is False  # no reply: kept, to be sent again
    assert rule.fired == 1 and r.get("stat:failed") == "1" and r.get(claim) == "lost"
    settler.retry_pending()
    assert settler.pending_filings == 0
    assert_discarded_once(r, claim, "lost")


def test_with_basic_fetch_a_discard_whose_reply_was_lost_is_made_once(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler = Settler(components.build(mode_settings(resp_proxy.url), identity=ME).ctx, keys.in_progress(ME))
    settler.use_basic_fetch()
    r = private_redis.client()
    raw, claim = fetched(r, "basic")
    r.delete(keys.in_progress(ME))  # popped by BRPOP: on no list
    resp_proxy.lose_reply(script="settle")
    assert settler.file(raw, discarded(raw)) is False
    settler.retry_pending()
    assert settler.pending_filings == 0
    assert_discarded_once(r, claim, "basic")


def test_a_discard_dropped_unsent_is_made_when_sent_again(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    settler = Settler(components.build(mode_settings(resp_proxy.url), identity=ME).ctx, keys.in_progress(ME))
    r = private_redis.client()
    raw, claim = fetched(r, "dropped")
    resp_proxy.drop_command(script="settle")
    assert settler.file(raw, discarded(raw)) is False
    assert r.get("stat:failed") is None
    settler.retry_pending()
    assert_discarded_once(r, claim, "dropped")


def test_a_handed_over_discard_is_made_by_another_process(r: redis.Redis, redis_server: RedisServer) -> None:
    settings = mode_settings(redis_server.url)
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    raw, claim = fetched(r, "handed")
    r.set(sidekiq_payload.discarded_key(), "wrong type for a moment")  # the filing is kept
    assert settler.file(raw, discarded(raw)) is False
    assert settler.hand_over() == 0
    assert r.llen(keys.in_progress(ME)) == 0 and r.llen(keys.UNSETTLED) == 1
    r.delete(sidekiq_payload.discarded_key())
    other = components.build(settings, identity="other:2:y")
    assert file_unsettled(other.client, other.scripts, settings, other.locks) == 1
    assert r.llen(keys.UNSETTLED) == 0
    # Not counted failed: a handed-over filing never is, in dead either (file_unsettled.lua).
    assert_discarded_once(r, claim, "handed", failed=None)


def test_the_death_hooks_run_for_a_discarded_job(r: redis.Redis, redis_server: RedisServer) -> None:
    settings = mode_settings(redis_server.url)
    parts = components.build(settings)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    raw, _ = fetched(r, "hooked", bid="kQz2-Vb_9XmA1w")
    settler.file(raw, discarded(raw))
    seen: list[tuple[dict[str, Any], death.Death]] = []
    death.on_death(lambda job, why: seen.append((job, why)))
    assert DeathHookRunner(parts.ctx).run_once() == 1
    ((job, why),) = seen
    assert job["jid"] == "hooked" and job["retry"] is False and job["bid"] == "kQz2-Vb_9XmA1w"
    assert why.cause == death.FAILED and why.error_class == "ValueError"
