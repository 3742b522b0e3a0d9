"""Death notices (cogworker:deaths) against a real Redis: every writer of cogworker:dead pushes exactly
one with the entry it filed, none for other sets, capped; and the runner that pops them for hooks."""

from __future__ import annotations

import json
import threading
from typing import Any

import redis

from cogworker import codec
from cogworker.api import death, retry
from cogworker.ops import NotFound, set_actions
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.store.scripts import Scripts
from cogworker.worker.running.death_hooks import DeathHookRunner
from cogworker.worker.settling.settle import Settler, file_unsettled, handover_record
from tests.support import components
from tests.support.redis_server import wait_until

ME = "me:1:x"


def notices(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(text) for text in r.lrange(keys.DEATHS, 0, -1)]


def fetched(r: redis.Redis, jid: str, retries: int = 0) -> str:
    raw = codec.dumps({"class": "x.y", "jid": jid, "queue": "default", "args": ["a"], "retry": retries})
    r.lpush(keys.in_progress(ME), raw)
    return raw


def test_settle_writes_a_notice_with_each_dead_filing_only(r: redis.Redis, settings: Settings) -> None:
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    dead_raw, retried_raw = fetched(r, "dead"), fetched(r, "retried", retries=3)
    assert settler.file(dead_raw, retry.on_failure(codec.loads(dead_raw), ValueError("no")))
    assert settler.file(retried_raw, retry.on_failure(codec.loads(retried_raw), ValueError("again")))
    assert settler.file(fetched(r, ""), retry.unreadable("%%", "default", "not json"))
    assert [(n["cause"], n["job"]["jid"]) for n in reversed(notices(r))] == [
        ("failed", "dead"),
        ("unreadable", ""),
    ]
    # The notice holds the entry exactly as dead does.
    assert notices(r)[1]["job"] == json.loads(r.zrangebyscore(keys.DEAD, "-inf", "+inf")[0])
    # Filed once: a second settle of the same job (recovery took it) writes nothing, no notice either.
    settler.file(dead_raw, retry.on_failure(codec.loads(dead_raw), ValueError("no")))
    assert r.llen(keys.DEATHS) == 2 and r.zcard(keys.DEAD) == 2


def test_the_notice_list_is_capped_newest_first(r: redis.Redis, redis_server: Any) -> None:
    settings = load_settings(redis_url=redis_server.url, death_notices_max=2)
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    for jid in ("a", "b", "c"):
        raw = fetched(r, jid)
        settler.file(raw, retry.on_failure(codec.loads(raw), ValueError(jid)))
    assert [n["job"]["jid"] for n in notices(r)] == ["c", "b"]
    assert r.zcard(keys.DEAD) == 3


def test_a_wrong_type_notice_list_stops_the_filing_and_loses_nothing(
    r: redis.Redis, settings: Settings
) -> None:
    settler = Settler(components.build(settings).ctx, keys.in_progress(ME))
    r.set(keys.DEATHS, "not a list")
    raw = fetched(r, "kept")
    assert not settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("x")))
    assert r.zcard(keys.DEAD) == 0 and r.lrange(keys.in_progress(ME), 0, -1) == [raw]
    assert keys.DEATHS in r.smembers(keys.GUARD_REQUESTS)
    r.delete(keys.DEATHS)  # what the key guard does (moved aside)
    settler.retry_pending()
    assert r.zcard(keys.DEAD) == 1 and [n["job"]["jid"] for n in notices(r)] == ["kept"]


def test_handed_over_filings_get_their_notice_when_filed(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings)
    for jid, retries in (("dies", 0), ("retries", 2)):
        raw = fetched(r, jid, retries)
        filing, text = retry.encoded(retry.on_failure(codec.loads(raw), ValueError(jid)), raw)
        r.rpush(keys.UNSETTLED, handover_record(filing, text))
    assert file_unsettled(parts.client, parts.scripts, settings, parts.locks) == 2
    assert [(n["cause"], n["job"]["jid"]) for n in notices(r)] == [("failed", "dies")]


def test_a_poison_pills_notice_comes_with_its_completed_entry_once(
    r: redis.Redis, settings: Settings
) -> None:
    parts = components.build(settings)
    pill = codec.dumps({"class": "x.y", "jid": "pill", "queue": "default", "args": []})
    r.zadd(keys.DEAD, {pill: 1})  # as requeue.lua files it, raw
    parts.recovery.complete_burials([pill])
    parts.recovery.complete_burials([pill])  # already swapped: nothing more
    [n] = notices(r)
    assert n["cause"] == "poison_pill" and n["job"]["error_class"] == "cogworker.ProcessDied"


def test_a_wrong_type_notice_list_keeps_a_pill_pending(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings)
    pill = codec.dumps({"class": "x.y", "jid": "pill2", "queue": "default", "args": []})
    r.zadd(keys.DEAD, {pill: 1})
    r.set(keys.DEATHS, "oops")
    parts.recovery.complete_burials([pill])
    assert parts.recovery.pending_burials == 1 and r.zrange(keys.DEAD, 0, -1) == [pill]
    assert keys.DEATHS in r.smembers(keys.GUARD_REQUESTS)
    r.delete(keys.DEATHS)
    parts.recovery.retry_burials()
    assert parts.recovery.pending_burials == 0 and [n["job"]["jid"] for n in notices(r)] == ["pill2"]


def test_the_poller_burying_an_entry_writes_its_notice(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings)
    r.zadd(keys.SCHEDULE, {"[not a job]": 0})
    parts.poller.enqueue_due()
    [n] = notices(r)
    assert n["cause"] == "unreadable" and n["job"]["raw"] == "[not a job]"


def _operator(r: redis.Redis, settings: Settings, barrier: threading.Barrier, out: list[str]) -> None:
    client = redis.Redis(connection_pool=r.connection_pool)
    barrier.wait()
    try:
        set_actions.kill(client, Scripts(client), settings, "retry", "k")
        out.append("killed")
    except NotFound:
        out.append("not found")


def test_two_operators_killing_one_entry_write_one_notice(r: redis.Redis, settings: Settings) -> None:
    job = {
        "class": "x.y",
        "jid": "k",
        "queue": "default",
        "args": [],
        "error_class": "E",
        "error_message": "m",
    }
    r.zadd(keys.RETRY, {codec.dumps(job): 10})
    barrier, out = threading.Barrier(2), []
    threads = [threading.Thread(target=_operator, args=(r, settings, barrier, out)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(out) == ["killed", "not found"]
    [n] = notices(r)
    assert n["cause"] == "killed" and n["job"]["jid"] == "k" and "killed_at" in n["job"]
    r.zadd(keys.SCHEDULE, {codec.dumps({**job, "jid": "s"}): 10})
    assert set_actions.kill_all(r, Scripts(r), settings, "scheduled").done == 1
    assert [n["job"]["jid"] for n in notices(r)] == ["s", "k"]


def test_the_runner_pops_only_with_hooks_oldest_first(r: redis.Redis, settings: Settings) -> None:
    runner = DeathHookRunner(components.build(settings).ctx)
    for jid in ("first", "second"):
        r.lpush(keys.DEATHS, death.notice("failed", codec.dumps({"jid": jid, "class": "x.y"})))
    assert runner.run_once() == 0 and r.llen(keys.DEATHS) == 2  # no hooks: left for a process with some
    seen: list[str] = []
    death.on_death(lambda job, d: seen.append(job["jid"]))
    assert runner.run_once() == 2
    assert seen == ["first", "second"] and r.llen(keys.DEATHS) == 0


def test_the_runner_thread_calls_hooks_and_survives_a_wrong_type_list(
    r: redis.Redis, settings: Settings
) -> None:
    parts = components.build(settings)
    runner = DeathHookRunner(parts.ctx, interval_s=0.05)
    seen: list[str] = []
    death.on_death(lambda job, d: seen.append(job["jid"]))
    r.set(keys.DEATHS, "wrong")
    runner.start()
    try:
        wait_until(lambda: keys.DEATHS in r.smembers(keys.GUARD_REQUESTS), timeout=5, message="guard asked")
        r.delete(keys.DEATHS)
        r.lpush(keys.DEATHS, death.notice("killed", codec.dumps({"jid": "later", "class": "x.y"})))
        wait_until(lambda: seen, timeout=5, message="the hook called")
        assert seen == ["later"] and r.llen(keys.DEATHS) == 0
    finally:
        runner.stop()
