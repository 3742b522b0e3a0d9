"""`/jobs/<jid>` in-process (TestClient) against the session's real Redis: a job in a queue, in the
retry, scheduled and dead sets (linked to its entry page), running in a real worker, known only by
its status, or nowhere; a search longer than one request's budget resumed by "Continue searching"
links to its end; bad cursors restarting; a live refresh that searches nothing; hostile job data
escaped; read-only mode changing nothing; invalid jids a 404; the jid search form; and the Redis
commands a request costs at 100 and at 50,000 dead entries."""

from __future__ import annotations

import html
import re
from unittest import mock

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.ops import locate
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.web import create_app, summary
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import RedisServer, wait_until
from tests.support.set_entries import job
from tests.support.web_requests import IMG, SCRIPT


def section(text: str, ident: str) -> str:
    found = re.search(rf'<section class="card" id="{ident}"[^>]*>(.*?)</section>', text, re.DOTALL)
    assert found is not None, f"no section {ident}"
    return found.group(1)


def places(text: str) -> list[str]:
    return re.findall(r'<li data-place="([^"]+)"', section(text, "where"))


def continue_link(text: str) -> str | None:
    found = re.search(r'<a class="btn" id="continue-search" href="([^"]+)"', text)
    return html.unescape(found.group(1)) if found else None


def fill_dead(r: redis.Redis, count: int, start: int = 0) -> None:
    """`count` dead entries of about 300 bytes, scored by number (higher: newer), in big ZADDs."""
    pipe = r.pipeline(transaction=False)
    for chunk in range(start, start + count, 5000):
        numbers = range(chunk, min(start + count, chunk + 5000))
        mapping = {codec.dumps(job(f"dead{n:06d}", error_message="x" * 150)): float(n) for n in numbers}
        pipe.zadd(keys.DEAD, mapping)  # type: ignore[arg-type]
    pipe.execute()


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
    # Only the running and status blocks are redrawn by a live refresh, never the search.
    assert 'id="where-running" data-live' in text and 'id="status" data-live' in text
    assert 'id="where" data-live' not in text and 'id="where-search" data-live' not in text


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
    assert "It is running, so the queues and sets were not searched" in where  # no script call
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
    where = section(text, "where")
    assert "Its status says it is complete, so the queues and sets were not searched" in where
    status = section(text, "status")
    assert "<dt>status</dt><dd>complete</dd>" in status and '<time datetime="2023-11-14T22:13:20Z">' in status
    assert "expires in" in status
    anyway = re.search(r'<a href="([^"]+)">Search them anyway</a>', where)
    assert anyway is not None and html.unescape(anyway.group(1)) == (
        "/jobs/done1?place=retry&at=0&first=retry&first=scheduled&first=dead"
    )
    searched = client.get(html.unescape(anyway.group(1))).text
    assert "Not found in any queue, set or process: it may have finished" in section(searched, "where")
    nothing = client.get("/jobs/nobody")
    assert nothing.status_code == 200 and "Not found in any queue" in nothing.text
    assert "No status recorded" in section(nothing.text, "status") and continue_link(nothing.text) is None


def test_hostile_job_data_renders_as_text(client: TestClient, r: redis.Redis) -> None:
    hostile = job("evil1", args=[SCRIPT, IMG], error_class=SCRIPT, error_message=IMG, queue=IMG)
    hostile["class"] = SCRIPT
    r.zadd(keys.DEAD, {codec.dumps(hostile): 5.0})
    r.lpush(keys.queue(IMG), codec.dumps({**hostile, "jid": "evil2"}))
    r.sadd(keys.QUEUES, IMG)
    r.hset(keys.status("evil1"), mapping={"status": SCRIPT, "class": IMG, "queue": IMG})
    text = client.get("/jobs/evil1").text
    assert places(text) == ["dead"]  # the first place found ends the search
    queued = client.get("/jobs/evil2").text
    assert places(queued) == ["queue"]
    for page_text in (text, queued):
        assert SCRIPT not in page_text and "<img" not in page_text and " style=" not in page_text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text
        assert "&lt;img src=x onerror=alert(1)&gt;" in page_text
    assert f'href="/queues/{"%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"}"' in queued
    # A hostile cursor is not a place: the search restarts, and nothing of it is echoed as markup.
    bad = client.get("/jobs/evil2", params={"place": IMG, "at": "1", "first": SCRIPT}).text
    assert places(bad) == ["queue"] and 'id="bad-cursor"' in bad
    assert SCRIPT not in bad and "<img" not in bad


def test_invalid_jids_are_404_and_the_search_form_leads_to_the_page(client: TestClient) -> None:
    for path in ("/jobs/a%2Ab", "/jobs/%3Cscript%3E", "/jobs/" + "x" * 101, "/jobs/a%20b"):
        assert client.get(path).status_code == 404, path
    assert client.get("/jobs?jid=abc123").headers["location"] == "/jobs/abc123"
    form = client.get("/jobs", params={"jid": "<b>"}).text
    assert "A jid is letters, digits" in form and 'value="&lt;b&gt;"' in form and 'id="where"' not in form
    assert 'name="jid"' in client.get("/jobs").text


def _commands(r: redis.Redis) -> dict[str, int]:
    return {name: int(value["calls"]) for name, value in r.info("commandstats").items()}


def _script_runs(r: redis.Redis) -> int:
    """EVALSHA calls that ran a script: a NOSCRIPT reply (a server that hasn't loaded the script
    yet, which redis-py answers by loading it and calling again) is counted by Redis as a failed call."""
    stats = r.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


def _page_commands(
    client: TestClient, r: redis.Redis, path: str, headers: dict[str, str] | None = None
) -> tuple[str, dict[str, int]]:
    client.get(path)  # warm: the connection's set-up and the script's loading are not the page's
    # Without the summary bar: its own, constant cost is counted in test_summary_and_search.py.
    with mock.patch.object(summary, "read", lambda client: None):
        before = _commands(r)
        response = client.get(path, headers=headers)
        assert response.status_code == 200
        after = _commands(r)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    delta.pop("cmdstat_info", None)  # this test's own INFO
    return response.text, delta


# Commands the locate script runs inside Redis (and the page's one length pipeline).
IN_SCRIPT = {"cmdstat_evalsha", "cmdstat_zcard", "cmdstat_llen", "cmdstat_zrevrange", "cmdstat_lrange"}


def test_a_request_costs_at_most_its_budget_at_100_and_at_50000_dead_entries(
    client: TestClient, r: redis.Redis
) -> None:
    r.lpush(keys.queue("default"), codec.dumps(job("q1")))
    r.sadd(keys.QUEUES, "default")
    fill_dead(r, 100)
    _, small = _page_commands(client, r, "/jobs/nobody")
    fill_dead(r, 49_900, start=100)
    text, big = _page_commands(client, r, "/jobs/nobody")
    assert continue_link(text) is not None  # 50,000 entries are more than one request searches
    assert small["cmdstat_evalsha"] == 1 and 1 <= big["cmdstat_evalsha"] <= locate.MAX_CALLS
    places_count = 4  # retry, scheduled, dead, the default queue
    for delta in (small, big):
        calls = delta["cmdstat_evalsha"]
        # Per script call: at most a length and a range per place (ZSCORE only for candidates).
        assert delta.get("cmdstat_zrevrange", 0) + delta.get("cmdstat_lrange", 0) <= calls * places_count
        # Lengths: the three sets' for the order, every place's for "searched N of M", and the
        # script's own (at most one per place per call).
        lengths = delta.get("cmdstat_zcard", 0) + delta.get("cmdstat_llen", 0)
        assert lengths <= 3 + places_count + calls * places_count
        assert "cmdstat_zscore" not in delta and "cmdstat_zrange" not in delta
    # Everything else the page sends is the same whatever the sets hold.
    assert {k: v for k, v in big.items() if k not in IN_SCRIPT} == {
        k: v for k, v in small.items() if k not in IN_SCRIPT
    }


def test_a_long_search_goes_on_through_continue_links_to_the_oldest_entry(
    client: TestClient, r: redis.Redis, redis_server: RedisServer
) -> None:
    fill_dead(r, 50_000)
    r.zadd(keys.DEAD, {codec.dumps(job("oldest1")): -1.0})  # read last: dead is read newest first
    before = _script_runs(r)
    path: str | None = "/jobs/oldest1"
    pages: list[str] = []
    progress: list[int] = []
    while path is not None:
        assert len(pages) < 50, "the search does not end"
        start = _script_runs(r)
        text = client.get(path).text
        assert _script_runs(r) - start <= locate.MAX_CALLS
        pages.append(text)
        path = continue_link(text)
        if path is not None:
            assert path.startswith("/jobs/oldest1?place=dead&at=")
            searched = re.search(r"Searched ([\d,]+) of 50,001 entries", text)
            assert searched is not None
            progress.append(int(searched.group(1).replace(",", "")))
    assert len(pages) >= 3 and progress == sorted(set(progress))
    assert places(pages[-1]) == ["dead"] and 'href="/dead/-1.0-oldest1"' in pages[-1]
    assert _script_runs(r) - before <= len(pages) * locate.MAX_CALLS
    # The same search in read-only mode: finding is a read, so nothing is hidden or refused.
    read_only = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    # Followed from where the last request above began; how far one request gets depends on its
    # time budget (MAX_WALL_S), so under load it may take more than one request from there.
    read_path: str | None = continue_link(pages[-2]) or ""
    for _ in range(50):
        last = read_only.get(read_path or "").text
        read_path = continue_link(last)
        if read_path is None:
            break
    assert read_path is None, "the read-only search does not end"
    assert places(last) == ["dead"] and '<form method="post"' not in section(last, "where")
    # How far one request gets depends on its time budget (MAX_WALL_S), so only where it goes on is compared.
    first = read_only.get("/jobs/oldest1").text
    assert (continue_link(first) or "").startswith("/jobs/oldest1?place=dead&at=")


def test_bad_cursors_restart_the_search_and_offsets_are_clamped(client: TestClient, r: redis.Redis) -> None:
    r.zadd(keys.DEAD, {codec.dumps(job("d1")): 1.0})
    for query in (
        {"place": "nowhere"},
        {"place": "dead", "at": "-3"},
        {"place": "dead", "at": "x"},
        {"place": "dead", "at": "²"},
        {"place": "dead", "at": "9" * 13},
        {"place": ""},
    ):
        text = client.get("/jobs/d1", params=query).text
        assert 'id="bad-cursor"' in text and places(text) == ["dead"], query
    # A valid place with an offset past its end is clamped: that place is done, the rest searched.
    text = client.get("/jobs/d1", params={"place": "dead", "at": "999999"}).text
    assert 'id="bad-cursor"' not in text and places(text) == [] and 'id="not-found"' in text
    # A bookmarked cursor from the start finds it like the plain page.
    assert places(client.get("/jobs/d1", params={"place": "retry", "at": "0"}).text) == ["dead"]


def test_a_live_refresh_redraws_status_and_running_without_searching(
    client: TestClient, r: redis.Redis
) -> None:
    fill_dead(r, 100)
    r.hset(keys.status("dead000007"), mapping={"status": "failed", "queue": "default"})
    text, plain = _page_commands(client, r, "/jobs/dead000007")
    assert places(text) == ["dead"] and plain["cmdstat_evalsha"] == 1
    live, refresh = _page_commands(client, r, "/jobs/dead000007", headers={"X-Cogworker-Live": "1"})
    assert "cmdstat_evalsha" not in refresh and "cmdstat_zrevrange" not in refresh
    assert "<dt>status</dt><dd>failed</dd>" in section(live, "status")
    assert re.search(r'<div id="where-running" data-live>\s*</div>', live)
