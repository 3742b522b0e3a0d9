"""The job page's Cancel button (`/jobs/<jid>` -> POST `/jobs/cancel`) in-process (TestClient) against
the session's real Redis: shown for a waiting job and not for a dead one or in read-only mode, asks
for confirmation first, then takes the job off its queue and flashes the case; a POST in read-only
mode is refused with the job left in place; a bad jid is an error flash."""

from __future__ import annotations

import html
import re

import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.web import create_app
from tests.support.redis_server import RedisServer
from tests.support.web_requests import SAME_ORIGIN


def push(r: redis.Redis, jid: str) -> None:
    r.lpush(
        keys.queue("default"),
        codec.dumps({"class": "demo_jobs.record", "args": [], "jid": jid, "queue": "default"}),
    )
    r.sadd(keys.QUEUES, "default")


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def test_a_waiting_job_is_cancelled_from_its_page(client: TestClient, r: redis.Redis) -> None:
    push(r, "webjob1")
    page = client.get("/jobs/webjob1").text
    assert 'id="cancel"' in page and 'action="/jobs/cancel"' in page and ">Cancel</button>" in page
    asked = client.post("/jobs/cancel", data={"jid": "webjob1", "back": "/jobs/webjob1"}, headers=SAME_ORIGIN)
    assert asked.status_code == 200 and "Cancel job webjob1?" in asked.text
    assert r.llen(keys.queue("default")) == 1  # nothing happens before the confirmation
    done = client.post(
        "/jobs/cancel",
        data={"jid": "webjob1", "back": "/jobs/webjob1", "confirm": "yes"},
        headers=SAME_ORIGIN,
    )
    assert done.status_code == 303 and done.headers["location"] == "/jobs/webjob1"
    after = client.get(done.headers["location"]).text
    assert flashes(after) == [("ok", "Job webjob1: queued: taken off queue default; it will not run.")]
    assert r.llen(keys.queue("default")) == 0
    assert r.get(keys.stat("cancelled")) == "1"
    assert 'id="cancel"' not in after  # nothing left to cancel


def test_no_button_for_a_dead_job(client: TestClient, r: redis.Redis) -> None:
    r.zadd(keys.DEAD, {codec.dumps({"class": "demo_jobs.boom", "jid": "webdead1", "queue": "default"}): 1.0})
    assert 'id="cancel"' not in client.get("/jobs/webdead1").text


def test_read_only_shows_no_button_and_refuses_the_post(r: redis.Redis, redis_server: RedisServer) -> None:
    push(r, "webjob2")
    read_only = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    assert ">Cancel</button>" not in read_only.get("/jobs/webjob2").text
    refused = read_only.post("/jobs/cancel", data={"jid": "webjob2", "confirm": "yes"}, headers=SAME_ORIGIN)
    assert refused.status_code == 403
    assert r.llen(keys.queue("default")) == 1


def test_a_bad_jid_is_an_error_flash(client: TestClient, r: redis.Redis) -> None:
    done = client.post(
        "/jobs/cancel", data={"jid": "a b", "back": "/jobs", "confirm": "yes"}, headers=SAME_ORIGIN
    )
    assert done.status_code == 303
    assert flashes(client.get(done.headers["location"]).text) == [
        ("error", "jid 'a b' is not a job id (letters, digits and _.:- only, at most 100)")
    ]
    assert r.keys() == ["cogworker:audit"]  # nothing written but the action's audit record
