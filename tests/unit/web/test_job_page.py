"""`/jobs/<jid>` in-process (TestClient) against the session's real Redis: a job in a queue, in the
retry, scheduled and dead sets (linked to its entry page), running in a real worker, known only by
its status, or nowhere; hostile job data escaped; invalid jids a 404; the jid search form; and the
Redis commands the page costs at 100 and at 5,000 dead entries."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.web import create_app
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import wait_until

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), follow_redirects=False)


def job(jid: str, **fields: Any) -> dict[str, Any]:
    return {
        "class": "demo_jobs.record",
        "args": [jid],
        "kwargs": {},
        "jid": jid,
        "queue": "default",
        **fields,
    }


def section(text: str, ident: str) -> str:
    found = re.search(rf'<section class="card" id="{ident}"[^>]*>(.*?)</section>', text, re.DOTALL)
    assert found is not None, f"no section {ident}"
    return found.group(1)


def places(text: str) -> list[str]:
    return re.findall(r'<li data-place="([^"]+)"', section(text, "where"))


def test_a_queued_job_shows_its_queue_place_in_line_and_payload(client: TestClient, r: redis.Redis) -> None:
    for payload in (job("before"), job("target", args=[1, "two"]), job("after")):
        r.lpush(keys.queue("default"), codec.dumps(payload))
    r.sadd(keys.QUEUES, "default")
    text = client.get("/jobs/target").text
    assert places(text) == ["queue"]
    where = section(text, "where")
    assert 'href="/queues/default"' in where and "1 job ahead of it (3 waiting)" in where
    payload = section(text, "payload")
    assert "&#34;jid&#34;: &#34;target&#34;" in payload and "&#34;two&#34;" in payload
    assert "No status recorded" in section(text, "status")
    assert 'id="where" data-live' in text


@pytest.mark.parametrize(
    ("key", "path", "label"),
    [
        (keys.RETRY, "/retries", "retry"),
        (keys.SCHEDULE, "/scheduled", "scheduled"),
        (keys.DEAD, "/dead", "dead"),
    ],
)
def test_a_set_entry_links_to_its_entry_page(
    client: TestClient, r: redis.Redis, key: str, path: str, label: str
) -> None:
    r.zadd(key, {codec.dumps(job("abc123", error_class="KeyError", error_message="nope")): 1700000000.5})
    text = client.get("/jobs/abc123").text
    assert places(text) == [label]
    assert f'href="{path}/1700000000.5-abc123"' in section(text, "where")
    assert "KeyError: nope" in section(text, "where")
    assert "&#34;error_class&#34;: &#34;KeyError&#34;" in section(text, "payload")


def test_a_job_running_in_a_real_worker_shows_where_it_runs(
    client: TestClient, workers: Workers, r: redis.Redis, configured: Settings
) -> None:
    import demo_jobs

    proc = workers.start()
    identity = workers.identity(proc)
    jid = demo_jobs.sleepy.perform_async("long", 3)
    wait_until(lambda: r.lrange("test:started", 0, -1), timeout=10, message="the job to start")
    text = wait_until(
        lambda: "running" in places(t := client.get(f"/jobs/{jid}").text) and t,
        timeout=10,
        message="the job shown running",
    )
    where = section(text, "where")
    assert identity in where and f"pid {proc.pid}" in where and 'href="/busy"' in where
    assert "demo_jobs.sleepy" in section(text, "payload")


def test_a_job_known_only_by_its_status_and_one_not_found(
    client: TestClient, r: redis.Redis, settings: Settings
) -> None:
    r.hset(
        keys.status("done1"),
        mapping={"status": "complete", "class": "demo_jobs.record", "updated_at": "1.7e9"},
    )
    r.expire(keys.status("done1"), 600)
    text = client.get("/jobs/done1").text
    assert places(text) == []
    assert "Not found in any queue, set or process: it may have finished" in section(text, "where")
    status = section(text, "status")
    assert "<dt>status</dt><dd>complete</dd>" in status and '<time datetime="2023-11-14T22:13:20Z">' in status
    assert "expires in" in status
    nothing = client.get("/jobs/nobody")
    assert nothing.status_code == 200 and "Not found in any queue" in nothing.text
    assert "No status recorded" in section(nothing.text, "status")


def test_hostile_job_data_renders_as_text(client: TestClient, r: redis.Redis) -> None:
    hostile = job("evil1", args=[SCRIPT, IMG], error_class=SCRIPT, error_message=IMG, queue=IMG)
    hostile["class"] = SCRIPT
    r.zadd(keys.DEAD, {codec.dumps(hostile): 5.0})
    r.lpush(keys.queue(IMG), codec.dumps(hostile))
    r.sadd(keys.QUEUES, IMG)
    r.hset(keys.status("evil1"), mapping={"status": SCRIPT, "class": IMG})
    text = client.get("/jobs/evil1").text
    assert places(text) == ["queue", "dead"]
    assert SCRIPT not in text and "<img" not in text and " style=" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert f'href="/queues/{"%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"}"' in text


def test_invalid_jids_are_404_and_the_search_form_leads_to_the_page(client: TestClient) -> None:
    for path in ("/jobs/a%2Ab", "/jobs/%3Cscript%3E", "/jobs/" + "x" * 101, "/jobs/a%20b"):
        assert client.get(path).status_code == 404, path
    assert client.get("/jobs?jid=abc123").headers["location"] == "/jobs/abc123"
    form = client.get("/jobs", params={"jid": "<b>"}).text
    assert "A jid is letters, digits" in form and 'value="&lt;b&gt;"' in form and 'id="where"' not in form
    assert 'name="jid"' in client.get("/jobs").text


def _commands(r: redis.Redis) -> dict[str, int]:
    return {name: int(value["calls"]) for name, value in r.info("commandstats").items()}


def _page_commands(client: TestClient, r: redis.Redis, path: str) -> dict[str, int]:
    client.get(path)  # warm: the connection's set-up and the script's loading are not the page's
    before = _commands(r)
    assert client.get(path).status_code == 200
    after = _commands(r)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    delta.pop("cmdstat_info", None)  # this test's own INFO
    return delta


def test_the_page_costs_the_same_commands_at_100_and_at_5000_dead_entries(
    client: TestClient, r: redis.Redis
) -> None:
    def fill(count: int, start: int = 0) -> None:
        pipe = r.pipeline(transaction=False)
        for n in range(start, start + count):
            pipe.zadd(keys.DEAD, {codec.dumps(job(f"dead{n:06d}", error_message="x" * 100)): float(n)})
        pipe.execute()

    r.lpush(keys.queue("default"), codec.dumps(job("q1")))
    r.sadd(keys.QUEUES, "default")
    fill(100)
    small = _page_commands(client, r, "/jobs/dead000050")
    fill(4900, start=100)
    big = _page_commands(client, r, "/jobs/dead004000")
    assert small == big
    assert small["cmdstat_evalsha"] == 1 and "cmdstat_zscan" not in small
