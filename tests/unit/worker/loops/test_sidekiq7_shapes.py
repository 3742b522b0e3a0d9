"""Mode 7's presence against what Sidekiq 7.3.9 writes and reads (sidekiq7_presence_facts.json: facts
read from its source, each naming its file): field names, types and units of the presence hash, its
`info`, the `:work` hash and the signals. No Sidekiq 7 runs here (Debian ships 6.4); this pins the shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.ops import ruby_processes
from cogworker.settings import load_settings
from cogworker.store import shards, sidekiq_keys
from cogworker.worker.loops import sidekiq_presence
from cogworker.worker.loops.heartbeat import Heartbeat
from tests.support import components
from tests.support.redis_server import RedisServer

FACTS = json.loads((Path(__file__).parent / "sidekiq7_presence_facts.json").read_text())
ME = "box:7:f00d"
JOB = {"class": "HardJob", "jid": "d" * 24, "queue": "default", "args": [7]}


@pytest.fixture(autouse=True)
def _back_to_default() -> Iterator[None]:
    yield
    shards.use_settings(load_settings())


def of_kind(value: Any, kind: str) -> bool:
    """Whether `value`, as JSON gives it back (or as a hash field's text), is of the facts' kind."""
    checks = {
        "json-object": lambda v: isinstance(json.loads(v), dict),
        "integer": lambda v: not isinstance(v, bool) and str(v).lstrip("-").isdigit(),
        "integer-microseconds": lambda v: str(v).isdigit(),
        "integer-kilobytes": lambda v: str(v).isdigit() and 1_000 < int(v) < 100_000_000,
        "integer-epoch-seconds": lambda v: isinstance(v, int) and 1e9 < v < 1e10,
        "float-epoch-seconds": lambda v: "." in str(v) and 1e9 < float(v) < 1e10,
        "the strings true or false": lambda v: v in ("true", "false"),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "list-of-strings": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
        "list-of-objects-string-to-integer": lambda v: (
            isinstance(v, list)
            and all(isinstance(o, dict) and all(isinstance(w, int) for w in o.values()) for o in v)
        ),
        "string-of-the-job-json": lambda v: isinstance(v, str) and isinstance(json.loads(v), dict),
    }
    return bool(checks[kind](value))


@pytest.fixture
def beaten(r: redis.Redis, redis_server: RedisServer) -> Heartbeat:
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat="7", queues="default,low")
    shards.use_settings(settings)
    running = [("t1", {"queue": "default", "payload": codec.dumps(JOB), "run_at": 1_800_000_000.5})]
    beat = Heartbeat(
        components.build(settings).ctx,
        ME,
        reliable=True,
        busy=lambda: 1,
        running=lambda: running,
        quiet=lambda: False,
        on_command=lambda _: None,
        version="1.0",
    )
    beat.beat()
    return beat


def test_the_facts_name_their_source_and_version() -> None:
    assert FACTS["version"] == "7.3.9"
    for part in ("presence", "info", "busy_jobs", "signals", "clean_stop"):
        assert FACTS[part]["source"].startswith("lib/sidekiq/")


def test_the_presence_hash_has_sidekiq_7s_fields_types_and_ttl(r: redis.Redis, beaten: Heartbeat) -> None:
    facts = FACTS["presence"]
    assert sidekiq_keys.presence(ME) == ME and ME in r.smembers(facts["registry_set"])
    presence = r.hgetall(ME)
    assert set(presence) == set(facts["fields"])
    for name, kind in facts["fields"].items():
        assert of_kind(presence[name], kind), (name, presence[name], kind)
    assert facts["ttl_s"] - 5 <= r.ttl(ME) <= facts["ttl_s"] == sidekiq_presence.PRESENCE_TTL_S


def test_info_has_sidekiq_7s_fields_and_types(r: redis.Redis, beaten: Heartbeat) -> None:
    info = json.loads(r.hget(ME, "info") or "")
    assert set(info) == set(FACTS["info"]["fields"])
    for name, kind in FACTS["info"]["fields"].items():
        assert of_kind(info[name], kind), (name, info[name], kind)
    assert info["embedded"] is False  # else quiet! and stop! refuse it


def test_the_work_hash_has_sidekiq_7s_shape(r: redis.Redis, beaten: Heartbeat) -> None:
    facts = FACTS["busy_jobs"]
    key = sidekiq_keys.busy_jobs(ME)
    assert key == ME + facts["key_suffix"]
    entry = json.loads(r.hget(key, "t1") or "")
    assert set(entry) == set(facts["value"])
    for name, kind in facts["value"].items():
        assert of_kind(entry[name], kind), (name, entry[name], kind)
    assert json.loads(entry["payload"]) == JOB
    assert facts["ttl_s"] - 5 <= r.ttl(key) <= facts["ttl_s"]


def test_signals_are_sidekiq_7s(r: redis.Redis, beaten: Heartbeat) -> None:
    facts = FACTS["signals"]
    assert sidekiq_keys.signals(ME) == ME + facts["key_suffix"]
    sent = set(facts["names"].values())
    assert set(sidekiq_presence.SIGNALS) == sent
    assert set(ruby_processes.SIGNAL_OF.values()) == {facts["names"]["quiet!"], facts["names"]["stop!"]}


def test_a_clean_stop_removes_what_sidekiq_7_removes(r: redis.Redis, beaten: Heartbeat) -> None:
    beaten.clear(list_empty=True)
    assert ME not in r.smembers("processes") and not r.exists(sidekiq_keys.busy_jobs(ME))
