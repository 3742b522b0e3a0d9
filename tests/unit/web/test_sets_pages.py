"""`/retries`, `/scheduled` and `/dead` in-process (TestClient) against the session's real Redis:
listing, pagination, order, the filters and their bounded search, an entry's page, every action with
its flash (and two operators retrying one entry), the confirmation of bulk actions, hostile data
escaped, read-only mode, and the Redis commands a listing costs at 100 and at 5,000 entries."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from unittest import mock

import pytest
import redis
from markupsafe import escape
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.api.backtrace import encode as encode_backtrace
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings, load_settings
from cogworker.web import create_app, summary
from cogworker.web import sets as web_sets
from tests.support.set_entries import add, dead_job
from tests.support.web_requests import IMG, SAME_ORIGIN, SCRIPT

DEAD, RETRY, SCHEDULED = "cogworker:dead", "cogworker:retry", "cogworker:schedule"
T0 = 1_764_500_000.0


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), follow_redirects=True)


def fill(r: redis.Redis, key: str, count: int, **fields: Any) -> None:
    """`count` entries j0..j{count-1}, scored T0+i (j{count-1} is the latest), in one pipeline."""
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.zadd(key, {codec.dumps(dead_job(f"j{i}", **fields)): T0 + i})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def esc(text: str) -> str:
    """`text` as Jinja2's autoescape writes it."""
    return str(escape(text))


def jids(page: str) -> list[str]:
    return re.findall(r'<tr data-jid="([^"]+)"', page)


def key_of(jid: str, score: float) -> str:
    return set_ops.entry_key(score, jid)


def flashes(page: str, kind: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(rf'<p class="flash flash-{kind}"[^>]*>([^<]*)</p>', page)]


def post(client: TestClient, path: str, data: dict[str, Any]) -> str:
    response = client.post(path, data=data, headers=SAME_ORIGIN)
    assert response.status_code == 200, response.text
    return response.text


def test_retries_open_next_due_first_with_their_columns_and_row_buttons(
    client: TestClient, r: redis.Redis
) -> None:
    add(r, RETRY, dead_job("old", args=[1, "a"], error_message="timed out"), score=T0)
    add(r, RETRY, dead_job("new", **{"class": "app.ReportJob"}), score=T0 + 60)
    page = client.get("/retries").text
    assert jids(page) == ["old", "new"]
    assert '<table id="entries">' in page
    assert "app.ReportJob" in page and "timed out" in page and "ValueError" in page
    assert esc('[1,"a"]') in page
    assert '<time datetime="2025-11-30T10:54:20Z">' in page  # T0 as UTC
    assert f'href="/retries/{key_of("new", T0 + 60)}"' in page
    for label in ("Retry now", "Delete", "Kill", "Retry selected", "Delete selected", "Kill selected"):
        assert f">{label}</button>" in page
    assert 'data-select-all="key"' in page and f'name="key" value="{key_of("old", T0)}"' in page
    assert jids(client.get("/retries", params={"order": "desc"}).text) == ["new", "old"]


def test_dead_has_no_kill_and_each_set_has_its_empty_state(client: TestClient, r: redis.Redis) -> None:
    assert "No dead jobs." in client.get("/dead").text
    assert "No retries." in client.get("/retries").text
    assert "No scheduled jobs." in client.get("/scheduled").text
    add(r, DEAD, dead_job("d"), score=T0)
    page = client.get("/dead").text
    assert jids(page) == ["d"] and ">Retry now</button>" in page
    assert "Kill" not in page
    assert client.post("/dead/kill", data={"key": key_of("d", T0)}, headers=SAME_ORIGIN).status_code == 405


def test_pages_of_25_with_links_that_keep_the_order(client: TestClient, r: redis.Redis) -> None:
    fill(r, DEAD, 60)
    first = client.get("/dead").text
    assert jids(first) == [f"j{i}" for i in range(59, 34, -1)]
    assert "page 1 of 3" in first and 'href="/dead?page=2"' in first
    last = client.get("/dead", params={"page": 3, "order": "asc"}).text
    assert jids(last) == [f"j{i}" for i in range(50, 60)]
    assert 'href="/dead?order=asc&amp;page=2"' in last and "Next" not in last
    assert "No entries on this page." in client.get("/dead", params={"page": 9}).text


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"job": "Report"}, ["b"]),
        ({"error": "Timeout"}, ["c"]),
        ({"error": "disk full"}, ["a"]),
        ({"args": '"user":17'}, ["a"]),
        ({"args": "weekly"}, ["c"]),
        ({"job": "boom", "error": "Value"}, ["a"]),
    ],
)
def test_each_filter(client: TestClient, r: redis.Redis, params: dict[str, str], expected: list[str]) -> None:
    add(r, DEAD, dead_job("a", args=[{"user": 17}], error_message="disk full"), score=T0)
    add(r, DEAD, dead_job("b", **{"class": "app.ReportJob"}), score=T0 + 1)
    add(r, DEAD, dead_job("c", kwargs={"when": "weekly"}, error_class="TimeoutError"), score=T0 + 2)
    page = client.get("/dead", params=params).text
    assert jids(page) == expected
    assert "Searched entries 1\u20133 of 3" in page
    for name, value in params.items():  # the form shows the filter it applied
        assert f'name="{name}" value="{esc(value)}"' in page


def test_a_filter_stops_after_a_page_of_matches(client: TestClient, r: redis.Redis) -> None:
    fill(r, DEAD, 40)
    page = client.get("/dead", params={"args": "x"}).text
    assert len(jids(page)) == 25
    assert "Searched entries 1\u201325 of 40" in page and 'href="/dead?args=x&amp;from=25"' in page


def test_entry_page_shows_payload_error_and_backtrace(client: TestClient, r: redis.Redis) -> None:
    trace = ["Traceback (most recent call last):", '  File "app.py", line 3, in run', "ValueError: x"]
    add(r, DEAD, dead_job("e1", args=[{"n": 1}], backtrace=trace), score=T0)
    response = client.get(f"/dead/{key_of('e1', T0)}")
    assert response.status_code == 200
    page = response.text
    for line in trace:
        assert f">{esc(line)}</span>" in page
    assert '<pre id="payload">{\n  &#34;class&#34;: &#34;demo_jobs.boom&#34;' in page
    assert "ValueError" in page and ">Retry now</button>" in page and ">Kill</button>" not in page
    assert client.get(f"/dead/{key_of('e1', T0 + 1)}").status_code == 404
    assert client.get("/dead/not-a-key").status_code == 404
    add(r, RETRY, dead_job("r1"), score=T0)
    assert ">Kill</button>" in client.get(f"/retries/{key_of('r1', T0)}").text


def test_entry_page_decodes_the_backtrace_stored_as_sidekiq_stores_it(
    client: TestClient, r: redis.Redis
) -> None:
    trace = ["Traceback (most recent call last):", '  File "app.py", line 3, in run', "ValueError: <x>"]
    add(r, RETRY, dead_job("e2", error_backtrace=encode_backtrace(trace)), score=T0)
    page = client.get(f"/retries/{key_of('e2', T0)}").text
    shown = re.search(r'<pre id="backtrace">(.*?)</pre>', page, re.DOTALL)
    assert shown is not None
    assert [html.unescape(t) for t in re.findall(r'<span class="bt-\w+">([^<]*)</span>', shown[1])] == trace
    assert '<span class="bt-error">ValueError: &lt;x&gt;</span>' in page


def test_retry_now_flashes_and_the_second_browser_is_told_it_was_gone(
    client: TestClient, r: redis.Redis, settings: Settings
) -> None:
    add(r, DEAD, dead_job("once", **{"class": "app.ReportJob"}), score=T0)
    other = TestClient(create_app(settings), follow_redirects=True)
    form = {"key": key_of("once", T0), "back": "/dead"}
    page = post(client, "/dead/retry", form)
    assert flashes(page, "ok") == ["Retried job once (app.ReportJob) onto queue default"]
    late = post(other, "/dead/retry", form)
    assert flashes(late, "ok") == []
    assert "already gone" in flashes(late, "error")[0]
    assert r.llen("cogworker:queue:default") == 1 and r.zcard(DEAD) == 0
    assert json.loads(r.lindex("cogworker:queue:default", 0))["jid"] == "once"


def test_delete_and_kill_one_entry(client: TestClient, r: redis.Redis) -> None:
    add(r, SCHEDULED, dead_job("s1"), score=T0)
    add(r, SCHEDULED, dead_job("s2"), score=T0 + 1)
    page = post(client, "/scheduled/delete", {"key": key_of("s1", T0), "back": "/scheduled"})
    assert flashes(page, "ok") == ["Deleted job s1 (demo_jobs.boom) from the scheduled set"]
    # The UI kills from retries only: a scheduled job has no error to be filed under.
    kill = client.post("/scheduled/kill", data={"key": key_of("s2", T0 + 1)}, headers=SAME_ORIGIN)
    assert kill.status_code == 405 and r.zcard(SCHEDULED) == 1
    add(r, RETRY, dead_job("r2"), score=T0 + 1)
    page = post(client, "/retries/kill", {"key": key_of("r2", T0 + 1), "back": "/retries"})
    assert flashes(page, "ok") == ["Killed job r2 (demo_jobs.boom): moved from the retry set to dead"]
    assert [json.loads(raw)["jid"] for raw in r.zrange(DEAD, 0, -1)] == ["r2"]


def test_a_selection_counts_done_and_already_gone(client: TestClient, r: redis.Redis) -> None:
    fill(r, RETRY, 4)
    keys = [key_of(f"j{i}", T0 + i) for i in range(4)]
    r.zremrangebyscore(RETRY, T0 + 3, T0 + 3)  # someone else took j3
    page = post(client, "/retries/delete-selected", {"key": keys, "back": "/retries"})
    assert flashes(page, "ok") == ["Deleted 3 entries; 1 was already gone"]
    assert r.zcard(RETRY) == 0
    fill(r, RETRY, 2)
    page = post(client, "/retries/retry-selected", {"key": keys[:2], "back": "/retries"})
    assert flashes(page, "ok") == ["Retried 2 entries"] and r.llen("cogworker:queue:default") == 2
    fill(r, RETRY, 2)
    page = post(client, "/retries/kill-selected", {"key": keys[:2], "back": "/retries"})
    assert flashes(page, "ok") == ["Killed 2 entries"] and r.zcard(DEAD) == 2
    page = post(client, "/retries/kill-selected", {"key": keys[:2], "back": "/retries"})
    assert flashes(page, "error") == ["Killed 0 entries; 2 were already gone"]
    assert flashes(post(client, "/retries/retry-selected", {"back": "/retries"}), "error")


def test_bulk_actions_ask_first_then_apply_the_filter(client: TestClient, r: redis.Redis) -> None:
    fill(r, DEAD, 5)
    add(r, DEAD, dead_job("other", **{"class": "app.Other"}), score=T0 + 10)
    listing = client.get("/dead").text
    assert ">Retry all</button>" in listing and ">Delete all</button>" in listing
    assert 'name="count" value="6"' in listing
    ask = client.post("/dead/delete-all", data={"count": "6", "back": "/dead"}, headers=SAME_ORIGIN)
    assert "Delete all 6 entries of the dead set for good?" in ask.text and "Yes, do it" in ask.text
    assert r.zcard(DEAD) == 6  # nothing done before the confirmation
    filtered = client.get("/dead", params={"job": "boom"}).text
    assert 'name="job" value="boom"' in filtered
    form = {"job": "boom", "count": "6", "back": "/dead?job=boom"}
    ask = client.post("/dead/retry-all", data=form, headers=SAME_ORIGIN).text
    assert esc("whose job class contains 'boom'") in ask
    page = post(client, "/dead/retry-all", {**form, "confirm": "yes"})
    assert flashes(page, "ok") == [
        "Retried 5 entries onto their queues (those whose job class contains 'boom')"
    ]
    assert jids(client.get("/dead").text) == ["other"] and r.llen("cogworker:queue:default") == 5
    page = post(client, "/dead/delete-all", {"confirm": "yes", "back": "/dead"})
    assert flashes(page, "ok") == ["Deleted 1 entry from the dead set"] and r.zcard(DEAD) == 0
    fill(r, RETRY, 3)
    page = post(client, "/retries/kill-all", {"confirm": "yes", "back": "/retries"})
    assert flashes(page, "ok") == ["Killed 3 entries to dead"] and r.zcard(DEAD) == 3


def test_hostile_entry_renders_as_text(client: TestClient, r: redis.Redis) -> None:
    hostile = dead_job(
        "x1",
        **{"class": SCRIPT},
        args=[IMG, SCRIPT],
        kwargs={"k": IMG},
        error_class=IMG,
        error_message=SCRIPT + IMG,
        queue=IMG,
        backtrace=[SCRIPT],
    )
    add(r, DEAD, hostile, score=T0)
    for page in (client.get("/dead").text, client.get(f"/dead/{key_of('x1', T0)}").text):
        assert "<script>alert" not in page and "<img src=x" not in page
        assert esc(SCRIPT) in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "No such page." not in client.get(f"/dead/{key_of('x1', T0)}").text


def test_read_only_shows_no_buttons_and_refuses_posts(redis_server: Any, r: redis.Redis) -> None:
    viewer = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    add(r, DEAD, dead_job("ro"), score=T0)
    for page in (viewer.get("/dead").text, viewer.get(f"/dead/{key_of('ro', T0)}").text):
        assert 'method="post"' not in page and 'name="key"' not in page
        assert not any(label in page for label in ("Retry now", "Delete", "Retry all", "Retry selected"))
    for path in ("/dead/retry", "/dead/delete", "/dead/retry-selected", "/dead/delete-all"):
        response = viewer.post(path, data={"key": key_of("ro", T0), "confirm": "yes"}, headers=SAME_ORIGIN)
        assert response.status_code == 403
    assert r.zcard(DEAD) == 1 and r.llen("cogworker:queue:default") == 0


def _calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_info",))


def _commands_per_page(client: TestClient, r: redis.Redis, path: str, **params: Any) -> int:
    client.get(path, params=params)  # the first request opens the connection
    # Without the summary bar: its own, constant cost is counted in test_summary_and_search.py.
    with mock.patch.object(summary, "read", lambda client: None):
        before = _calls(r)
        assert client.get(path, params=params).status_code == 200
        return _calls(r) - before


@pytest.mark.parametrize(
    ("path", "params"), [("/dead", {}), ("/dead", {"page": 3}), ("/dead", {"job": "no"})]
)
def test_commands_per_listing_do_not_grow_with_the_set(
    client: TestClient, r: redis.Redis, path: str, params: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_sets, "SEARCH_BUDGET_S", 60.0)  # the budget is tested on its own
    fill(r, DEAD, 100)
    small = _commands_per_page(client, r, path, **params)
    fill(r, DEAD, 5_000)
    big = _commands_per_page(client, r, path, **params)
    entry = _commands_per_page(client, r, f"/dead/{key_of('j4000', T0 + 4000)}")
    if params.get("job"):
        # A filter with no match reads the set slice by slice (within its time budget): ZCARD and
        # one ZRANGE of BATCH entries per slice.
        assert (small, big) == (2, 1 + 5_000 // set_ops.BATCH)
    else:
        assert small == big == 2  # ZCARD + one ZRANGE
    assert entry == 1  # one ZRANGEBYSCORE


def test_under_a_mount_prefix_links_and_actions_keep_it(settings: Settings, r: redis.Redis) -> None:
    host = Starlette(routes=[Mount("/ops", create_app(settings))])
    browser = TestClient(host, follow_redirects=True)
    add(r, DEAD, dead_job("m1"), score=T0)
    listing = browser.get("/ops/dead").text
    key = key_of("m1", T0)
    assert f'href="/ops/dead/{key}"' in listing and 'formaction="/ops/dead/retry"' in listing
    entry = browser.get(f"/ops/dead/{key}").text
    assert 'action="/ops/dead/delete"' in entry and 'name="back" value="/ops/dead"' in entry
    done = browser.post("/ops/dead/delete", data={"key": key, "back": "/ops/dead"}, headers=SAME_ORIGIN)
    assert done.url.path == "/ops/dead" and "No dead jobs." in done.text
    assert flashes(done.text, "ok") == ["Deleted job m1 (demo_jobs.boom) from the dead set"]
