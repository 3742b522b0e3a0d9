"""`/periodic` in-process (TestClient) against the session's real Redis: the entries a real ticker
registered, their next slot in their time zone, "Enqueue now" pushing the entry's job with its
arguments to its queue, hostile registrations escaped, and read-only mode."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from typing import Any
from zoneinfo import ZoneInfo

import periodic_targets
import redis
from starlette.testclient import TestClient

from cogworker.api.periodic import Entry
from cogworker.settings import Settings, load_settings
from cogworker.web import create_app
from cogworker.worker.loops.ticker import Ticker
from tests.support.components import build
from tests.support.redis_server import RedisServer
from tests.support.web_requests import IMG, SAME_ORIGIN, SCRIPT


def register(settings: Settings, *entries: Entry) -> None:
    """A worker's first look at its entries (Redis's clock): the baseline writes each registration."""
    Ticker(build(settings).ctx, entries=entries).tick()


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def row(text: str, name: str) -> str:
    found = re.search(rf'<tr data-entry="{re.escape(name)}">(.*?)</tr>', text, re.DOTALL)
    assert found is not None, f"no row for {name}"
    return found.group(1).replace("<wbr>", "")  # break opportunities in long names


def queued(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(f"cogworker:queue:{queue}", 0, -1))]


def test_the_page_lists_each_registered_entry_with_its_next_slot_in_its_time_zone(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    assert "No periodic entries registered" in client.get("/periodic").text
    register(
        configured,
        Entry("tokyo", periodic_targets.rollup, "15 7 * * 1", tz="Asia/Tokyo", args=(3,), queue="reports"),
        Entry("hourly", periodic_targets.rollup, "0 * * * *", until_executed=True),
    )
    r.set("cogworker:periodic:running:hourly", "f00dfeed")
    text = client.get("/periodic").text
    assert re.findall(r'<tr data-entry="([^"]*)"', text) == ["hourly", "tokyo"]
    tokyo = row(text, "tokyo")
    for cell in ("periodic_targets.rollup", "15 7 * * 1", "Asia/Tokyo", 'href="/queues/reports"', "[3]"):
        assert cell in tokyo
    # The next slot, as a UTC <time>: next Monday 07:15 in Tokyo.
    [next_iso] = re.findall(r'<td class="next-slot"><time datetime="([^"]+)">', tokyo)
    upcoming = dt.datetime.fromisoformat(next_iso.replace("Z", "+00:00")).astimezone(ZoneInfo("Asia/Tokyo"))
    assert (upcoming.weekday(), upcoming.hour, upcoming.minute) == (0, 7, 15)
    now = dt.datetime.now(ZoneInfo("Asia/Tokyo"))
    assert dt.timedelta(0) < upcoming - now <= dt.timedelta(days=7)
    hourly = row(text, "hourly")
    assert 'href="/jobs/f00dfeed"' in hourly  # until_executed: the run holding its lock
    assert "Enqueue now" in hourly and "Enqueue now" in tokyo


def test_enqueue_now_pushes_the_entry_job_with_its_arguments_and_says_jid_and_queue(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    register(
        configured,
        Entry(
            "tokyo", periodic_targets.rollup, "15 7 * * 1", args=(3, "x"), kwargs={"k": []}, queue="reports"
        ),
    )
    response = client.post(
        "/periodic/enqueue", data={"name": "tokyo", "back": "/periodic"}, headers=SAME_ORIGIN
    )
    assert response.status_code == 303 and response.headers["location"] == "/periodic"
    [payload] = queued(r, "reports")
    assert payload["class"] == "periodic_targets.rollup"
    assert payload["args"] == [3, "x"] and payload["kwargs"] == {"k": []}
    messages = flashes(client.get("/periodic").text)
    assert ("ok", f"tokyo: periodic_targets.rollup pushed to queue reports as {payload['jid']}") in messages
    missing = client.post("/periodic/enqueue", data={"name": "gone"}, headers=SAME_ORIGIN)
    assert missing.status_code == 303
    assert flashes(client.get("/periodic").text) == [
        ("error", "no periodic entry 'gone' (see `cogworker periodic list`)")
    ]
    assert len(queued(r, "reports")) == 1


def test_hostile_registration_values_render_as_text(client: TestClient, r: redis.Redis) -> None:
    registration = {
        "job": SCRIPT,
        "cron": IMG,
        "tz": SCRIPT,
        "queue": IMG,
        "arguments": json.dumps({"args": [SCRIPT, IMG], "kwargs": {}}),
    }
    r.hset("cogworker:periodic:entries", IMG, json.dumps(registration))
    text = client.get("/periodic").text
    assert SCRIPT not in text and "<img" not in text and " style=" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in text
    assert [html.unescape(v) for v in re.findall(r'<tr data-entry="([^"]*)"', text)] == [IMG]


def test_read_only_hides_and_refuses_enqueue_now(
    redis_server: RedisServer, r: redis.Redis, configured: Settings
) -> None:
    register(configured, Entry("hourly", periodic_targets.rollup, "0 * * * *"))
    client = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    text = client.get("/periodic").text
    assert 'data-entry="hourly"' in text and "Enqueue now" not in text and 'method="post"' not in text
    refused = client.post("/periodic/enqueue", data={"name": "hourly"}, headers=SAME_ORIGIN)
    assert refused.status_code == 403
    assert r.exists("cogworker:queue:default") == 0
