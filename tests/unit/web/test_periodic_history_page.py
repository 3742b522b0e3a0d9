"""`/periodic` and `/periodic/entries/<name>` in-process against the session's real Redis: the last
slot's outcome with its jid, an entry's last runs, and pause (asked to confirm first) and resume."""

from __future__ import annotations

import html
import json
import re

import periodic_targets
import redis
from starlette.testclient import TestClient

from cogworker.api.periodic import Entry
from cogworker.settings import Settings
from cogworker.worker.loops.ticker import Ticker
from tests.support.components import build
from tests.support.web_requests import SAME_ORIGIN


def ticker(settings: Settings, *entries: Entry) -> Ticker:
    return Ticker(build(settings).ctx, entries=entries)


def row(text: str, name: str) -> str:
    found = re.search(rf'<tr data-entry="{re.escape(name)}"[^>]*>(.*?)</tr>', text, re.DOTALL)
    assert found is not None, f"no row for {name}"
    return found.group(1)


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def redis_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def test_last_slot_says_enqueued_with_the_jid_and_the_entry_page_lists_the_runs(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    # An every-second entry on Redis's own clock, so the page's "now" agrees with the slots.
    every_second = Entry("tick", periodic_targets.rollup, "* * * * * *", until_executed=True)
    t = ticker(configured, every_second)
    now = redis_now(r)
    t.tick(now=now)
    t.tick(now=now + 1)
    t.tick(now=now + 2)  # the first run is still queued: skipped
    [payload] = r.lrange("cogworker:queue:default", 0, -1)
    jid = json.loads(payload)["jid"]
    listing = row(client.get("/periodic").text, "tick")
    assert 'data-outcome="skipped"' in listing and f'href="/jobs/{jid}"' in listing
    page = client.get("/periodic/entries/tick").text
    outcomes = re.findall(r'<span class="badge outcome [^"]*" data-outcome="(\w+)"', page)
    assert outcomes == ["skipped", "enqueued"]
    assert f'href="/jobs/{jid}"' in page and "still queued or running" in page
    assert "not ended (holds the entry&#39;s lock)" in page  # the enqueued run, untracked, holds the lock
    assert client.get("/periodic/entries/nope").status_code == 404


def test_pause_asks_first_then_pauses_and_resume_undoes_it(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    ticker(configured, Entry("hourly", periodic_targets.rollup, "0 * * * *")).tick()
    asked = client.post("/periodic/pause", data={"name": "hourly", "back": "/periodic"}, headers=SAME_ORIGIN)
    assert asked.status_code == 200 and "Pause periodic entry hourly?" in asked.text
    assert r.smembers("cogworker:periodic:paused") == set()
    done = client.post(
        "/periodic/pause", data={"name": "hourly", "back": "/periodic", "confirm": "yes"}, headers=SAME_ORIGIN
    )
    assert done.status_code == 303 and r.smembers("cogworker:periodic:paused") == {"hourly"}
    text = client.get("/periodic").text
    assert flashes(text) == [
        ("ok", "hourly: paused; its slots are recorded as paused and enqueue nothing until it is resumed")
    ]
    hourly = row(text, "hourly")
    assert ">paused</span>" in hourly and "Resume" in hourly and ">Pause<" not in hourly
    assert "Enqueue now" in hourly
    resumed = client.post("/periodic/resume", data={"name": "hourly"}, headers=SAME_ORIGIN)
    assert resumed.status_code == 303 and r.smembers("cogworker:periodic:paused") == set()
    assert flashes(client.get("/periodic").text) == [("ok", "hourly: resumed; its next slot runs as planned")]
    missing = client.post("/periodic/pause", data={"name": "nope", "confirm": "yes"}, headers=SAME_ORIGIN)
    assert missing.status_code == 303
    assert flashes(client.get("/periodic").text)[0][0] == "error"
    assert r.smembers("cogworker:periodic:paused") == set()
