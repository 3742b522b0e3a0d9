"""`cogworker doctor` against a real Redis: each check's OK/WARN/FAIL and the exit code."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
import redis

from cogworker.ops import doctor
from cogworker.settings import Settings
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401


def levels(cli: CLI) -> dict[str, str]:
    return {c["name"]: c["level"] for c in cli("doctor", "--json").json()["checks"]}


@pytest.fixture
def restore_config(r: redis.Redis) -> Iterator[None]:
    saved = {name: r.config_get(name)[name] for name in ("maxmemory-policy", "save")}
    try:
        yield
    finally:
        for name, value in saved.items():
            r.config_set(name, value)


def test_a_fresh_test_redis_passes_with_warnings(cli: CLI) -> None:
    out = cli("doctor")
    assert out.code == 0
    lines = out.out.splitlines()
    assert lines[0].startswith("OK    redis version: ")
    assert "OK    maxmemory-policy: noeviction" in lines
    assert any(line.startswith("WARN  persistence: off") for line in lines)  # tests run --save "" no AOF
    assert any(line.startswith("WARN  processes: no live worker process") for line in lines)
    assert lines[-1] == "doctor: WARN"


def test_an_evicting_redis_fails(cli: CLI, r: redis.Redis, restore_config: None) -> None:
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.config_set("save", "3600 1")
    out = cli("doctor")
    assert out.code == 1
    assert "FAIL  maxmemory-policy: allkeys-lru: Redis may evict keys" in out.out
    assert "OK    persistence: RDB (save 3600 1)" in out.out
    assert out.out.splitlines()[-1] == "doctor: FAIL"


def test_wrong_type_keys_are_reported_not_moved(cli: CLI, r: redis.Redis) -> None:
    r.set("cogworker:dead", "oops")
    r.hset("cogworker:queue:default", "a", "b")
    r.sadd("cogworker:queues", "default")
    out = cli("doctor", "--json")
    assert out.code == 1
    [check] = [c for c in out.json()["checks"] if c["name"] == "key types"]
    assert check["level"] == "FAIL"
    assert "cogworker:dead is a string, should be a zset" in check["details"]
    assert "cogworker:queue:default is a hash, should be a list" in check["details"]
    assert r.type("cogworker:dead") == "string"  # reported only
    assert r.keys("cogworker:quarantine:*") == []


def test_queues_no_live_process_reads(cli: CLI, r: redis.Redis) -> None:
    clock = int(r.time()[0])
    r.lpush("cogworker:queue:orphaned", json.dumps({"class": "a.b", "jid": "1", "queue": "orphaned"}))
    r.sadd("cogworker:queues", "idle", "fresh", "orphaned")
    r.zadd("cogworker:live-queues", {"fresh": clock, "idle": clock - 3600})
    r.lpush("cogworker:queue:fresh", "{}")
    out = cli("doctor", "--json")
    assert out.code == 1
    [check] = [c for c in out.json()["checks"] if c["name"] == "unread queues"]
    assert check["level"] == "FAIL"
    assert check["details"][0] == "orphaned: 1 job(s) waiting, never read"
    assert check["details"][1].startswith("idle: empty, last read 36")
    assert len(check["details"]) == 2
    r.delete("cogworker:queue:orphaned")
    assert levels(cli)["unread queues"] == "WARN"


def test_quarantine_unsettled_and_orphaned_lists_are_warnings(cli: CLI, r: redis.Redis) -> None:
    r.set("cogworker:quarantine:unsettled:1.5", "junk", ex=3600)
    r.rpush("cogworker:unsettled", "{}")
    r.rpush("cogworker:inprogress:gone-host:1:ab", "{}")
    r.sadd("cogworker:inprogress-identities", "gone-host:1:ab")
    out = cli("doctor")
    assert out.code == 0
    assert "WARN  quarantine: 1 record(s) moved aside" in out.out
    assert "cogworker:quarantine:unsettled:1.5 (string, expires in 60 minutes)" in out.out
    assert "WARN  unsettled: 1 retry/dead filing(s)" in out.out
    assert "WARN  orphaned jobs: 1 job(s)" in out.out
    assert "gone-host:1:ab: 1 job(s), never beat" in out.out


def test_clock_skew(r: redis.Redis, settings: Settings) -> None:
    assert doctor.check_clock(r, settings).level == "OK"
    ahead = doctor.check_clock(r, settings, clock=lambda: time.time() + 5)
    assert ahead.level == "WARN"
    # Redis's clock is read somewhere inside the round trip, so the reading is -5 s give or take half of it.
    found = re.match(r"([-+]\d+\.\d+) s \(Redis minus this host; round trip (\d+\.\d) ms\)", ahead.message)
    assert found is not None, ahead.message
    skew, round_trip_s = float(found[1]), float(found[2]) / 1000
    assert abs(skew + 5) <= round_trip_s / 2 + 0.002


def test_version_check() -> None:
    assert doctor.version_check("6.2.0").level == "OK"
    assert doctor.version_check("7.4.1").level == "OK"
    assert doctor.version_check("6.0.16").level == "FAIL"
    assert doctor.version_check("weird").level == "WARN"
