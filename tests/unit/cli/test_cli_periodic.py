"""`cogworker periodic list` and `cogworker periodic enqueue NAME` against a real Redis, with entries
registered by a real ticker."""

from __future__ import annotations

import datetime as dt
import json
import time
from zoneinfo import ZoneInfo

import periodic_targets
import redis

from cogworker.api.periodic import Entry
from cogworker.ops import periodic as periodic_ops
from cogworker.settings import Settings, load_settings
from cogworker.worker.loops.ticker import Ticker
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.components import build
from tests.support.redis_server import RedisServer


def register(url: str, *entries: Entry) -> None:
    """A worker's first look at its entries, now: the baseline writes each registration."""
    settings: Settings = load_settings(redis_url=url)
    Ticker(build(settings).ctx, entries=entries).tick()


def test_list_shows_each_entry_as_text_and_json(cli: CLI, redis_server: RedisServer) -> None:
    assert cli("periodic", "list").out.strip().startswith("(no periodic entries registered")
    assert cli("periodic", "list", "--json").json() == []
    register(
        redis_server.url,
        Entry("paris", periodic_targets.rollup, "30 8 * * *", tz="Europe/Paris", args=(1, "a"), queue="mail"),
        Entry("hourly", periodic_targets.rollup, "0 * * * *", until_executed=True),
    )
    data = cli("periodic", "list", "--json").json()
    assert [e["name"] for e in data] == ["hourly", "paris"]
    paris = data[1]
    assert (paris["job"], paris["cron"], paris["tz"], paris["queue"]) == (
        "periodic_targets.rollup",
        "30 8 * * *",
        "Europe/Paris",
        "mail",
    )
    assert paris["args"] == [1, "a"] and paris["kwargs"] == {} and paris["until_executed"] is False
    # The next 08:30 in Paris, whatever the day and season the test runs in.
    local = dt.datetime.fromtimestamp(paris["next_slot"], ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.second) == (8, 30, 0)
    assert 0 < paris["next_slot"] - time.time() <= 25 * 3600
    assert data[0]["until_executed"] is True and data[0]["queue"] == "default"
    text = cli("periodic", "list").out.splitlines()
    assert text[0].split() == [
        "NAME", "JOB", "CRON", "TZ", "QUEUE", "ARGS", "UNTIL_EXECUTED", "NEXT", "PAUSED", "LAST"
    ]  # fmt: skip
    assert text[2].split()[:2] == ["paris", "periodic_targets.rollup"]
    assert "Europe/Paris" in text[2] and "mail" in text[2] and '[1,"a"]' in text[2]


def test_enqueue_pushes_the_entry_job_and_agrees_with_the_ops_listing(
    cli: CLI, r: redis.Redis, redis_server: RedisServer
) -> None:
    register(redis_server.url, Entry("paris", periodic_targets.rollup, "30 8 * * *", args=(1,), queue="mail"))
    result = cli("periodic", "enqueue", "paris", "--json")
    assert result.code == 0
    data = result.json()
    assert data["entry"] == "paris" and data["queue"] == "mail" and data["job"] == "periodic_targets.rollup"
    [raw] = r.lrange("cogworker:queue:mail", 0, -1)
    payload = json.loads(raw)
    assert payload["jid"] == data["jid"] and payload["args"] == [1]
    text = cli("periodic", "enqueue", "paris")
    assert text.code == 0
    assert text.out.strip().startswith("paris: pushed periodic_targets.rollup to queue mail as ")
    assert r.llen("cogworker:queue:mail") == 2
    assert [e.name for e in periodic_ops.entries(r)] == [
        e["name"] for e in cli("periodic", "list", "--json").json()
    ]


def test_enqueue_of_an_unknown_entry_fails_with_exit_1_and_usage_errors_exit_2(cli: CLI) -> None:
    missing = cli("periodic", "enqueue", "nope")
    assert missing.code == 1
    assert missing.err.strip() == "cogworker: no periodic entry 'nope' (see `cogworker periodic list`)"
    assert cli("periodic").code == 2
    assert cli("periodic", "enqueue").code == 2


def test_pause_and_resume_change_the_listing_and_are_idempotent(
    cli: CLI, r: redis.Redis, redis_server: RedisServer
) -> None:
    register(redis_server.url, Entry("paris", periodic_targets.rollup, "30 8 * * *"))
    assert cli("periodic", "pause", "nope").code == 1  # an unknown entry: nothing paused
    assert r.exists("cogworker:periodic:paused") == 0
    paused = cli("periodic", "pause", "paris")
    assert paused.code == 0 and paused.out.startswith("paris: paused;")
    assert cli("periodic", "pause", "paris", "--json").json() == {
        "entry": "paris",
        "paused": True,
        "changed": False,
    }
    [entry] = cli("periodic", "list", "--json").json()
    assert entry["paused"] is True
    header, line = cli("periodic", "list").out.splitlines()
    assert line[header.index("PAUSED") :].split()[0] == "yes"
    resumed = cli("periodic", "resume", "paris")
    assert resumed.code == 0 and resumed.out.strip() == "paris: resumed; its next slot runs as planned"
    assert cli("periodic", "resume", "paris").out.strip() == "paris: was not paused"
    assert r.smembers("cogworker:periodic:paused") == set()


def test_list_says_what_became_of_the_last_slot(cli: CLI, r: redis.Redis, redis_server: RedisServer) -> None:
    settings: Settings = load_settings(redis_url=redis_server.url)
    ticker = Ticker(build(settings).ctx, entries=[Entry("tick", periodic_targets.rollup, "* * * * * *")])
    seconds, micros = r.time()
    now = seconds + micros / 1e6
    ticker.tick(now=now)
    ticker.tick(now=now + 1)
    [payload] = r.lrange("cogworker:queue:default", 0, -1)
    jid = json.loads(payload)["jid"]
    header, line = cli("periodic", "list").out.splitlines()
    assert line[header.index("LAST") :].split()[-2:] == ["enqueued", jid]
    [entry] = cli("periodic", "list", "--json").json()
    assert [(run["outcome"], run["jid"]) for run in entry["runs"]] == [("enqueued", jid)]
