"""`/queues` and `/queues/<name>` in-process (TestClient) against the session's real Redis: the
listing, pause/resume (and a real worker that doesn't fetch a paused queue), clear through its
confirmation page, pagination, deleting one job, hostile data escaped, read-only mode, and the
Redis commands a queue page costs at 100 and at 5,000 jobs."""

from __future__ import annotations

import html
import json
import re
from unittest import mock

import redis
from starlette.testclient import TestClient

from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.web import create_app, summary
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import RedisServer, wait_until
from tests.support.web_requests import IMG, SAME_ORIGIN, SCRIPT


def push(r: redis.Redis, queue: str, count: int, start: int = 0, **extra: object) -> None:
    """Jobs pushed as the client pushes them (LPUSH, name registered): the last one is at index 0."""
    payloads = [
        json.dumps({"jid": f"j{n}", "class": "demo.work", "args": [n], "enqueued_at": 1.7e9 + n, **extra})
        for n in range(start, start + count)
    ]
    for chunk in range(0, len(payloads), 1000):
        r.lpush(keys.queue(queue), *payloads[chunk : chunk + 1000])
    r.sadd(keys.QUEUES, queue)


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def post(client: TestClient, path: str, data: dict[str, str]) -> list[tuple[str, str]]:
    """POST an action from the page it was shown on; the flashes on the page it redirects back to."""
    response = client.post(path, data=data, headers=SAME_ORIGIN)
    assert response.status_code == 303, response.text
    return flashes(client.get(response.headers["location"]).text)


def rows(text: str, attribute: str) -> list[str]:
    return [html.unescape(v) for v in re.findall(rf'<tr {attribute}="([^"]*)"', text)]


def test_queues_lists_every_known_queue_with_size_latency_and_paused(
    client: TestClient, r: redis.Redis
) -> None:
    push(r, "mail", 3)
    push(r, "default", 1)
    r.sadd(keys.PAUSED, "held")  # paused before anything was pushed: still known
    page = client.get("/queues")
    assert page.status_code == 200
    assert rows(page.text, "data-queue") == ["default", "held", "mail"]
    mail = page.text.split('<tr data-queue="mail">')[1].split("</tr>")[0]
    assert 'href="/queues/mail"' in mail and '<td class="num">3</td>' in mail
    assert re.search(r">\d+d\d\dh<", mail)  # latency: enqueued in 2023, so days
    held = page.text.split('<tr data-queue="held">')[1].split("</tr>")[0]
    assert "paused" in held and ">Resume</button>" in held and ">Pause</button>" not in held
    assert ">Pause</button>" in mail and ">Clear</button>" in mail
    assert 'id="queue-list" data-live' in page.text

    r.flushall()
    assert "No queues yet" in client.get("/queues").text


def test_pause_and_resume_change_the_paused_set(client: TestClient, r: redis.Redis) -> None:
    push(r, "mail", 1)
    assert post(client, "/queues/pause", {"name": "mail", "back": "/queues"}) == [
        ("ok", "Queue mail paused: no process fetches from it until it is resumed.")
    ]
    assert r.smembers(keys.PAUSED) == {"mail"}
    assert post(client, "/queues/pause", {"name": "mail", "back": "/queues"}) == [
        ("ok", "Queue mail was already paused.")
    ]
    assert post(client, "/queues/resume", {"name": "mail", "back": "/queues/mail"}) == [
        ("ok", "Queue mail resumed.")
    ]
    assert r.smembers(keys.PAUSED) == set()
    assert post(client, "/queues/pause", {"name": "bad name", "back": "/queues"}) == [
        ("error", "not a queue name: a non-empty name without whitespace, ':', ',' or control characters")
    ]
    assert r.smembers(keys.PAUSED) == set()


def test_a_queue_paused_from_the_ui_is_not_fetched_by_a_real_worker_until_resumed(
    client: TestClient, r: redis.Redis, workers: Workers, configured: Settings
) -> None:
    import demo_jobs

    proc = workers.start(COGWORKER_QUEUES="mail,default")
    workers.identity(proc)
    post(client, "/queues/pause", {"name": "mail", "back": "/queues"})
    demo_jobs.record.set(queue="mail").perform_async("held")
    demo_jobs.record.perform_async("marker")
    # The worker reads mail first; it ran the later job on default, so it passed the paused mail by.
    wait_until(lambda: r.lrange("test:ran", 0, -1), timeout=10, message="the marker job to run")
    assert [x.split()[0] for x in r.lrange("test:ran", 0, -1)] == ["marker"]
    assert r.llen(keys.queue("mail")) == 1
    page = client.get("/queues/mail").text
    assert "paused" in page and len(rows(page, "data-jid")) == 1

    post(client, "/queues/resume", {"name": "mail", "back": "/queues"})
    wait_until(lambda: r.llen("test:ran") == 2, timeout=10, message="the held job to run after Resume")
    assert r.lrange("test:ran", 0, -1)[1].split()[0] == "held"


def test_clear_asks_first_then_deletes_every_waiting_job(client: TestClient, r: redis.Redis) -> None:
    push(r, "mail", 3)
    push(r, "other", 2)
    asked = client.post(
        "/queues/clear", data={"name": "mail", "size": "3", "back": "/queues"}, headers=SAME_ORIGIN
    )
    assert asked.status_code == 200
    assert "Delete all 3 jobs waiting in queue mail?" in asked.text
    assert "Yes, do it" in asked.text
    assert r.llen(keys.queue("mail")) == 3  # nothing happens before the second click

    form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', asked.text))
    assert form["confirm"] == "yes" and form["name"] == "mail"
    assert post(client, "/queues/clear", form) == [("ok", "Queue mail cleared: 3 jobs deleted.")]
    assert r.llen(keys.queue("mail")) == 0
    assert r.llen(keys.queue("other")) == 2
    assert not r.sismember(keys.QUEUES, "mail")


def test_queue_page_paginates_newest_first(client: TestClient, r: redis.Redis) -> None:
    push(r, "mail", 60)
    first = client.get("/queues/mail")
    assert first.status_code == 200
    assert rows(first.text, "data-jid") == [f"j{n}" for n in range(59, 34, -1)]
    assert "the last row of the last page runs next" in first.text
    assert 'href="/queues/mail?page=2" rel="next"' in first.text
    assert 'href="/queues/mail?page=3" rel="last"' in first.text
    assert "page 1 of 3" in first.text
    assert 'href="/jobs/j59"' in first.text
    assert '<time datetime="2023-11-14T22:14:19Z">' in first.text  # j59's enqueued_at, 1.7e9 + 59

    last = client.get("/queues/mail", params={"page": 3})
    assert rows(last.text, "data-jid") == [f"j{n}" for n in range(9, -1, -1)]
    assert 'rel="next"' not in last.text and 'href="/queues/mail?page=2" rel="prev"' in last.text
    assert "No jobs on this page" in client.get("/queues/mail", params={"page": 9}).text


def test_an_unknown_queue_is_empty_and_an_impossible_name_is_404(client: TestClient, r: redis.Redis) -> None:
    empty = client.get("/queues/never-used")
    assert empty.status_code == 200
    assert "No jobs waiting in this queue." in empty.text
    for bad in ("/queues/a%20b", "/queues/a:b", "/queues/a,b", "/queues/"):
        assert client.get(bad).status_code == 404, bad
    push(r, "a/b", 2)  # a slash is allowed in a name: the link escapes it and the route takes it back
    assert 'href="/queues/a%2Fb"' in client.get("/queues").text
    assert rows(client.get("/queues/a%2Fb").text, "data-jid") == ["j1", "j0"]


def test_delete_removes_one_job_and_says_so_when_it_is_gone(client: TestClient, r: redis.Redis) -> None:
    push(r, "mail", 30)
    page = client.get("/queues/mail").text
    row = page.split('<tr data-jid="j20">')[1].split("</tr>")[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', row))
    assert fields == {"back": "/queues/mail", "name": "mail", "jid": "j20", "index": "9"}
    push(r, "mail", 5, start=100)  # the queue moves while the operator reads the page
    assert post(client, "/queues/delete", fields) == [("ok", "Job j20 (demo.work) deleted from queue mail.")]
    left = [json.loads(x)["jid"] for x in r.lrange(keys.queue("mail"), 0, -1)]
    assert len(left) == 34 and "j20" not in left
    assert post(client, "/queues/delete", fields) == [
        ("error", "job j20 is no longer in queue mail (it ran, moved or was deleted)")
    ]
    assert r.llen(keys.queue("mail")) == 34


def test_hostile_queue_and_job_data_render_as_text(client: TestClient, r: redis.Redis) -> None:
    queue = SCRIPT  # no whitespace, ':' or ',': a valid queue name
    r.lpush(
        keys.queue(queue),
        json.dumps({"jid": IMG, "class": SCRIPT + IMG, "args": [SCRIPT, IMG], "enqueued_at": 1.7e9}),
    )
    r.sadd(keys.QUEUES, queue)
    for path in ("/queues", "/queues/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"):
        text = client.get(path).text
        assert "<script>alert" not in text and "<img src=x" not in text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, path
    page = client.get("/queues/%3Cscript%3Ealert%281%29%3C%2Fscript%3E").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert rows(page, "data-jid") == [IMG]


def test_read_only_hides_the_buttons_and_refuses_every_action(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    client = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    push(r, "mail", 2)
    r.sadd(keys.PAUSED, "held")
    for path in ("/queues", "/queues/mail", "/queues/held"):
        text = client.get(path).text
        assert 'method="post"' not in text and "<button" not in text.split("<main>")[1], path
    for path, data in (
        ("/queues/pause", {"name": "mail"}),
        ("/queues/resume", {"name": "held"}),
        ("/queues/clear", {"name": "mail", "confirm": "yes"}),
        ("/queues/delete", {"name": "mail", "jid": "j0", "index": "1"}),
    ):
        assert client.post(path, data=data, headers=SAME_ORIGIN).status_code == 403, path
    assert r.smembers(keys.PAUSED) == {"held"}
    assert r.llen(keys.queue("mail")) == 2


def _commands(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def _page_commands(client: TestClient, r: redis.Redis, path: str) -> dict[str, int]:
    client.get(path)  # warm: the connection's own set-up commands are not the page's
    # Without the summary bar: its own, constant cost is counted in test_summary_and_search.py.
    with mock.patch.object(summary, "read", lambda client: None):
        before = _commands(r)
        assert client.get(path).status_code == 200
        after = _commands(r)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    delta.pop("cmdstat_info", None)  # this test's own INFO
    return delta


def test_a_queue_page_costs_the_same_commands_at_100_and_at_5000_jobs(
    client: TestClient, r: redis.Redis
) -> None:
    push(r, "small", 100)
    push(r, "big", 5000)
    small = _page_commands(client, r, "/queues/small?page=2")
    big = _page_commands(client, r, "/queues/big?page=2")
    assert small == big
    assert small.get("cmdstat_lrange") == 1 and sum(small.values()) <= 6
    listing = _page_commands(client, r, "/queues")
    push(r, "big", 5000, start=5000)
    assert _page_commands(client, r, "/queues") == listing
