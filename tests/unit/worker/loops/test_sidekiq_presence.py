"""The Sidekiq mode's presence, written by heartbeat.lua on the beat's own round trip: Sidekiq's hash,
busy jobs and signals beside cogworker's own presence (which stays as it is), in Sidekiq 6's and 7's
shapes; removed on a clean stop; nothing of it with the mode off."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.settings import Settings, load_settings
from cogworker.store import keys, shards, sidekiq_keys
from cogworker.worker.loops import sidekiq_presence
from cogworker.worker.loops.heartbeat import Heartbeat
from tests.support import components
from tests.support.redis_server import RedisServer

ME = "host:4242:abc123"
JOB = {"class": "HardWorker", "jid": "a" * 24, "queue": "default", "args": [1, "two"], "retry": True}


@pytest.fixture(autouse=True)
def _back_to_default() -> Iterator[None]:
    yield
    shards.use_settings(load_settings())


def in_mode(redis_server: RedisServer, compat: str, **more: Any) -> Settings:
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat=compat, queues="default,low", **more)
    shards.use_settings(settings)
    return settings


def heartbeat(
    settings: Settings, commands: list[str] | None = None, running: list[Any] | None = None, **kw: Any
) -> Heartbeat:
    parts = components.build(settings)
    jobs = running if running is not None else []
    return Heartbeat(
        parts.ctx,
        ME,
        reliable=True,
        busy=lambda: len(jobs),
        running=lambda: jobs,
        quiet=kw.pop("quiet", lambda: False),
        on_command=(commands if commands is not None else []).append,
        tag="slot 1",
        version="9.9.9",
        **kw,
    )


def running_job(job: dict[str, Any] = JOB) -> list[tuple[str, dict[str, Any]]]:
    return [("t140", {"queue": "default", "payload": codec.dumps(job), "run_at": 1_800_000_000.25})]


@pytest.mark.parametrize("compat", ["6", "7"])
def test_a_beat_writes_sidekiqs_presence_beside_cogworkers_own(
    r: redis.Redis, redis_server: RedisServer, compat: str
) -> None:
    beat = heartbeat(in_mode(redis_server, compat), running=running_job())
    beat.beat()
    assert ME in r.smembers("processes")  # the one set, Sidekiq's bare name in the mode
    own = r.hgetall(keys.process(ME))
    assert own["quiet"] == "0" and json.loads(own["info"])["version"] == "9.9.9"  # as without the mode

    presence = r.hgetall(ME)
    assert set(presence) == {"info", "busy", "beat", "quiet", "rss", "rtt_us"}
    assert presence["busy"] == "1" and presence["quiet"] == "false"
    assert abs(float(presence["beat"]) - time.time()) < 5
    rss_kb = int(presence["rss"])
    assert 1_000 < rss_kb < 10_000_000  # KB, not bytes
    assert int(presence["rtt_us"]) == 0  # the first beat has no earlier round trip to report
    assert 50 <= r.ttl(ME) <= 60
    info = json.loads(presence["info"])
    assert info["identity"] == ME and info["tag"] == "slot 1" and info["queues"] == ["default", "low"]
    assert info["labels"] == ["cogworker"] and isinstance(info["started_at"], float)

    busy_key = f"{ME}:workers" if compat == "6" else f"{ME}:work"
    assert sidekiq_keys.busy_jobs(ME) == busy_key
    entry = json.loads(r.hget(busy_key, "t140") or "")
    assert entry["queue"] == "default" and entry["run_at"] == 1_800_000_000
    payload = entry["payload"] if compat == "6" else json.loads(entry["payload"])
    assert isinstance(entry["payload"], dict if compat == "6" else str)
    assert payload == JOB
    if compat == "7":
        assert entry["payload"] == codec.dumps(JOB)  # the payload's own text, as Sidekiq 7 writes it
    assert 50 <= r.ttl(busy_key) <= 60

    beat.beat()
    assert int(r.hget(ME, "rtt_us") or 0) > 0  # the previous beat's round trip


def test_sidekiq_7s_info_carries_version_weights_and_embedded(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    heartbeat(in_mode(redis_server, "7")).beat()
    info = json.loads(r.hget(ME, "info") or "")
    assert info["version"] == "cogworker 9.9.9"
    assert info["weights"] == [{"default": 0, "low": 0}]  # strict order, as Sidekiq writes it
    assert info["embedded"] is False
    assert not r.exists(f"{ME}:work")  # nothing running: no busy hash, as Sidekiq 7


def test_a_quiet_or_stopping_process_says_quiet_true(r: redis.Redis, redis_server: RedisServer) -> None:
    heartbeat(in_mode(redis_server, "6"), quiet=lambda: True).beat()
    assert r.hget(ME, "quiet") == "true"
    heartbeat(in_mode(redis_server, "6"), stopping=lambda: True).beat()
    assert r.hget(ME, "quiet") == "true"


def test_sidekiqs_signals_are_taken_one_a_beat_as_remote_commands(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    commands: list[str] = []
    beat = heartbeat(in_mode(redis_server, "6"), commands)
    for name in ("TSTP", "TTIN", "TERM", "HUP"):
        r.lpush(f"{ME}-signals", name)  # as Sidekiq::Process#quiet!, #dump_threads, #stop! push them
    r.lpush(keys.signals(ME), "resume")  # cogworker's own list is read as before, beside it
    beat.beat()
    assert commands == ["quiet", "resume"]
    for _ in range(3):
        beat.beat()
    assert commands == ["quiet", "resume", "dump", "stop"]  # HUP is logged and dropped
    assert not r.exists(f"{ME}-signals")


def test_a_large_payload_is_cut_to_its_arguments_summary(r: redis.Redis, redis_server: RedisServer) -> None:
    big = {**JOB, "args": ["x" * 50_000]}
    heartbeat(in_mode(redis_server, "7"), running=running_job(big)).beat()
    entry = json.loads(r.hget(f"{ME}:work", "t140") or "")
    payload = json.loads(entry["payload"])
    assert payload["jid"] == JOB["jid"] and payload["class"] == "HardWorker"
    assert len(entry["payload"]) < 1_000 and "truncated" in payload["args"][0]


def test_an_unreadable_payload_is_still_json_for_sidekiq(r: redis.Redis, redis_server: RedisServer) -> None:
    broken = [("t1", {"queue": "default", "payload": "{not json", "run_at": 1.0})]
    heartbeat(in_mode(redis_server, "6"), running=broken).beat()
    entry = json.loads(r.hget(f"{ME}:workers", "t1") or "")
    assert entry["payload"]["class"] == "(unreadable payload)"


def test_a_clean_stop_removes_sidekiqs_presence(r: redis.Redis, redis_server: RedisServer) -> None:
    beat = heartbeat(in_mode(redis_server, "6"), running=running_job())
    beat.beat()
    beat.clear(list_empty=True)
    assert not r.exists(ME, f"{ME}:workers", f"{ME}-signals", keys.process(ME))
    assert ME not in r.smembers("processes")


def test_with_the_mode_off_a_beat_writes_nothing_of_sidekiqs(r: redis.Redis, settings: Settings) -> None:
    shards.use_settings(settings)
    r.lpush(f"{ME}-signals", "TERM")
    commands: list[str] = []
    heartbeat(settings, commands, running=running_job()).beat()
    assert commands == []
    assert sorted(k for k in r.keys("*") if not k.startswith(keys.PREFIX)) == [f"{ME}-signals"]


def test_the_busy_entry_keeps_sidekiqs_types() -> None:
    item = {"queue": "q", "payload": codec.dumps(JOB), "run_at": 12.9}
    keys.use_prefix("cogworker:", "", "6")
    try:
        assert json.loads(sidekiq_presence.busy_entry(item, JOB, JOB["args"]))["run_at"] == 12
    finally:
        shards.use_settings(load_settings())


def test_under_a_sidekiq_6_namespace_every_key_is_namespaced(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    beat = heartbeat(in_mode(redis_server, "6", sidekiq_namespace="rails"), running=running_job())
    r.lpush(f"rails:{ME}-signals", "TSTP")
    beat.beat()
    assert ME in r.smembers("rails:processes") and r.exists(f"rails:{ME}", f"rails:{ME}:workers") == 2
    assert not r.exists(f"rails:{ME}-signals") and not r.exists(ME)


def test_a_longer_presence_ttl_keeps_sidekiqs_presence_as_long(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    heartbeat(
        in_mode(redis_server, "6", presence_ttl_s=300, heartbeat_interval_s=90, orphan_threshold_s=600)
    ).beat()
    assert 290 <= r.ttl(ME) <= 300
