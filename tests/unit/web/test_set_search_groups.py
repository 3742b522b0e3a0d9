"""`/retries`, `/scheduled` and `/dead` (TestClient, real Redis): a filter that reads past the first
window within its time budget and says how far it got when the budget runs out, with a "continue"
link; the orders each set opens with and their opposites; Scheduled's own words; and the Groups view
(counts by job class and error class, acting on a whole group through the bulk actions)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.settings import Settings, load_settings
from cogworker.web import create_app, set_groups_web
from cogworker.web import sets as web_sets
from tests.support.set_entries import add, dead_job
from tests.support.web_requests import SAME_ORIGIN

DEAD, RETRY, SCHEDULED = "cogworker:dead", "cogworker:retry", "cogworker:schedule"
T0 = 1_764_500_000.0


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), follow_redirects=True)


def fill(r: redis.Redis, key: str, count: int, first: int = 0, **fields: Any) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(first, first + count):
        pipe.zadd(key, {codec.dumps(dead_job(f"j{i}", **fields)): T0 + i})
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()


def jids(page: str) -> list[str]:
    return re.findall(r'<tr data-jid="([^"]+)"', page)


def text_of(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</(?:p|div)>', page, re.DOTALL)
    assert found is not None, f"no #{element_id}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found[1])).split())


def hrefs(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page)]


def needles_past_the_first_window(r: redis.Redis) -> None:
    """20,000 dead entries, and three matches older than all of them: the last read, newest first."""
    fill(r, DEAD, 20_000)
    for n in range(3):
        add(r, DEAD, dead_job(f"needle{n}", **{"class": "app.Needle"}), score=T0 - 10 + n)


def test_a_filter_reads_past_the_first_window_until_the_set_is_done(
    client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_sets, "SEARCH_BUDGET_S", 60.0)  # time enough for any machine
    needles_past_the_first_window(r)
    page = client.get("/dead", params={"job": "Needle"}).text
    assert jids(page) == ["needle2", "needle1", "needle0"]
    assert text_of(page, "searched") == "Searched entries 1\u201320,003 of 20,003; 3 matches."
    assert 'id="continue-search"' not in page and 'rel="next"' not in page


def test_when_the_budget_runs_out_the_page_says_how_far_it_got_and_continues(
    client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No time at all: each request reads one slice (it always reads one, so it moves on).
    monkeypatch.setattr(web_sets, "SEARCH_BUDGET_S", 0.0)
    needles_past_the_first_window(r)
    page = client.get("/dead", params={"job": "Needle"}).text
    assert jids(page) == []
    assert text_of(page, "searched").startswith(
        "Scanned 500 of 20,003 entries, 0 matches so far: the search stops after 0 ms a page."
    )
    assert "No matches yet among the entries scanned" in page
    found: list[str] = []
    requests = 1
    while 'id="continue-search"' in page:
        onward = re.search(r'id="continue-search" href="([^"]+)"', page)
        assert onward is not None
        page = client.get(html.unescape(onward[1])).text
        found += jids(page)
        requests += 1
        assert requests <= 41
    assert found == ["needle2", "needle1", "needle0"] and requests == 41
    assert text_of(page, "searched") == "Searched entries 20,001\u201320,003 of 20,003; 3 matches."


def test_continue_keeps_the_order_and_the_filter(
    client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_sets, "SEARCH_BUDGET_S", 0.0)
    fill(r, RETRY, 1_200)
    page = client.get("/retries", params={"job": "boom", "args": "nothing", "order": "desc"}).text
    assert text_of(page, "searched").startswith("Scanned 500 of 1,200 entries")
    assert "/retries?job=boom&args=nothing&order=desc&from=500" in hrefs(page)


@pytest.mark.parametrize(
    ("path", "key", "opening", "other", "first_order"),
    [
        ("/retries", RETRY, "Next first", "Latest first", "asc"),
        ("/scheduled", SCHEDULED, "Next first", "Latest first", "asc"),
        ("/dead", DEAD, "Newest first", "Oldest first", "desc"),
    ],
)
def test_each_set_opens_in_its_order_and_the_toggle_is_the_opposite(
    client: TestClient, r: redis.Redis, path: str, key: str, opening: str, other: str, first_order: str
) -> None:
    fill(r, key, 60)
    ascending = [f"j{i}" for i in range(60)]
    page = client.get(path).text
    opened = ascending if first_order == "asc" else ascending[::-1]
    assert jids(page) == opened[:25]
    assert f'class="here" aria-current="true">{opening}</a>' in page
    reverse = "desc" if first_order == "asc" else "asc"
    assert f'href="{path}?order={reverse}">{other}</a>' in page
    flipped = client.get(path, params={"order": reverse}).text
    assert jids(flipped) == opened[::-1][:25]
    assert f'class="here" aria-current="true">{other}</a>' in flipped
    # Paging keeps the order and the filter.
    second = client.get(path, params={"order": reverse, "page": 2}).text
    assert jids(second) == opened[::-1][25:50]
    assert f"{path}?order={reverse}&page=3" in hrefs(second)


def test_scheduled_says_enqueue_and_has_no_kill_nor_error_filter(client: TestClient, r: redis.Redis) -> None:
    add(r, SCHEDULED, {k: v for k, v in dead_job("s1").items() if "error" not in k}, score=T0)
    page = client.get("/scheduled").text
    assert ">Enqueue now</button>" in page and "Retry now" not in page
    assert ">Enqueue all</button>" in page and ">Enqueue selected</button>" in page
    assert "Kill" not in page and 'name="error"' not in page and "<th>Error</th>" not in page
    assert "Grouped by failure" not in page
    entry = client.get(f"/scheduled/{T0!r}-s1").text
    assert ">Enqueue now</button>" in entry and ">Kill</button>" not in entry
    done = client.post(
        "/scheduled/retry", data={"key": f"{T0!r}-s1", "back": "/scheduled"}, headers=SAME_ORIGIN
    )
    assert "Enqueued job s1 (demo_jobs.boom) onto queue default" in html.unescape(done.text)
    assert r.llen("cogworker:queue:default") == 1


def failures(r: redis.Redis, key: str) -> None:
    """Three failures: 5 app.Mail ValueErrors, 3 app.Mail TimeoutErrors, 2 app.MailDigest ValueErrors."""
    for i in range(5):
        job = dead_job(f"mv{i}", **{"class": "app.Mail"}, error_message=f"bad address {i}", failed_at=T0 + i)
        add(r, key, {**job, "retried_at": T0 + 100 + i}, score=T0 + i)
    for i in range(3):
        job = dead_job(f"mt{i}", **{"class": "app.Mail"}, error_class="TimeoutError", failed_at=T0 + 50)
        add(r, key, job, score=T0 + 10 + i)
    for i in range(2):
        add(r, key, dead_job(f"dv{i}", **{"class": "app.MailDigest"}, failed_at=T0), score=T0 + 20 + i)


def group_rows(page: str) -> list[tuple[str, str]]:
    rows = re.findall(r'<tr data-group="([^"|]*)\|([^"]*)">', page)
    return [(html.unescape(a), html.unescape(b)) for a, b in rows]


def test_groups_count_each_class_and_error_with_the_newest_message(
    client: TestClient, r: redis.Redis
) -> None:
    failures(r, DEAD)
    page = client.get("/dead/groups").text
    assert group_rows(page) == [
        ("app.Mail", "ValueError"),
        ("app.Mail", "TimeoutError"),
        ("app.MailDigest", "ValueError"),
    ]
    assert text_of(page, "group-count") == "3 distinct failures among all 10 entries."
    first = page[page.index('data-group="app.Mail|ValueError"') :].split("</tr>")[0]
    assert '<td class="num"><a href="/dead?class=app.Mail&amp;error_class=ValueError">5</a></td>' in first
    assert "bad address 4" in first  # the entry that failed last (its retried_at)
    assert '<time datetime="2025-11-30T10:53:20Z">' in first  # first failed: T0
    assert '<time datetime="2025-11-30T10:55:04Z">' in first  # last failed: T0 + 104
    assert "Grouped by failure" in client.get("/dead").text


def test_a_groups_link_lists_exactly_that_group(client: TestClient, r: redis.Redis) -> None:
    failures(r, DEAD)
    page = client.get("/dead", params={"class": "app.Mail", "error_class": "ValueError"}).text
    assert sorted(jids(page)) == [f"mv{i}" for i in range(5)]  # not app.MailDigest, not TimeoutError
    assert "Group: job class app.Mail, error class ValueError" in text_of(page, "group-filter")
    assert 'name="class" value="app.Mail"' in page and 'name="error_class" value="ValueError"' in page


def test_a_whole_group_is_retried_after_a_confirmation(client: TestClient, r: redis.Redis) -> None:
    failures(r, DEAD)
    page = client.get("/dead/groups").text
    row = page[page.index('data-group="app.Mail|TimeoutError"') :].split("</tr>")[0]
    assert 'action="/dead/retry-all"' in row and 'action="/dead/delete-all"' in row
    assert "kill-all" not in page  # dead entries aren't killed again
    form = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', row.split("</form>")[0]))
    assert form == {
        "back": "/dead/groups",
        "class": "app.Mail",
        "error_class": "TimeoutError",
        "count": "3",
        "group": "1",
    }
    ask = client.post("/dead/retry-all", data=form, headers=SAME_ORIGIN).text
    question = (
        "Retry the 3 entries of the dead set whose job class is 'app.Mail' and error class is "
        "'TimeoutError' now"
    )
    assert question in html.unescape(ask)
    assert r.zcard(DEAD) == 10  # nothing before the confirmation
    done = client.post("/dead/retry-all", data={**form, "confirm": "yes"}, headers=SAME_ORIGIN).text
    assert "Retried 3 entries onto their queues" in html.unescape(done)
    assert r.llen("cogworker:queue:default") == 3 and r.zcard(DEAD) == 7
    assert group_rows(client.get("/dead/groups").text) == [
        ("app.Mail", "ValueError"),
        ("app.MailDigest", "ValueError"),
    ]


def test_a_retry_group_can_be_killed_and_deleted(client: TestClient, r: redis.Redis) -> None:
    failures(r, RETRY)
    page = client.get("/retries/groups").text
    assert page.count('action="/retries/kill-all"') == 3
    form = {
        "class": "app.MailDigest",
        "error_class": "ValueError",
        "count": "2",
        "group": "1",
        "confirm": "yes",
    }
    done = client.post("/retries/kill-all", data={**form, "back": "/retries/groups"}, headers=SAME_ORIGIN)
    assert "Killed 2 entries to dead" in html.unescape(done.text)
    assert r.zcard(DEAD) == 2 and r.zcard(RETRY) == 8
    form.update({"class": "app.Mail", "count": "5"})
    done = client.post("/retries/delete-all", data={**form, "back": "/retries/groups"}, headers=SAME_ORIGIN)
    assert "Deleted 5 entries from the retry set" in html.unescape(done.text) and r.zcard(RETRY) == 3


def test_groups_in_read_only_mode_have_no_buttons(redis_server: Any, r: redis.Redis) -> None:
    viewer = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    failures(r, RETRY)
    page = viewer.get("/retries/groups").text
    assert len(group_rows(page)) == 3 and 'method="post"' not in page and "<th>Actions</th>" not in page


def test_a_partial_count_says_so(client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(set_groups_web, "COUNT_BUDGET_S", 0.0)  # one slice, then out of time
    fill(r, DEAD, 1_200)
    page = client.get("/dead/groups").text
    assert text_of(page, "group-count").startswith(
        "Partial count: 1 distinct failure among the first 500 of 1,200 entries"
    )
    assert 'class="search-partial"' in page
    assert '<input type="hidden" name="group" value="partial">' in page
    form = {"class": "demo_jobs.boom", "error_class": "ValueError", "count": "500", "group": "partial"}
    ask = html.unescape(
        client.post("/dead/delete-all", data={**form, "back": "/dead/groups"}, headers=SAME_ORIGIN).text
    )
    assert "(500 counted in the part of the set read so far; the whole set is searched)" in ask
    done = client.post(
        "/dead/delete-all", data={**form, "confirm": "yes", "back": "/dead"}, headers=SAME_ORIGIN
    )
    assert "Deleted 1,200 entries from the dead set" in html.unescape(done.text) and r.zcard(DEAD) == 0
    assert "Nothing to group" in client.get("/retries/groups").text
    assert client.get("/scheduled/groups").status_code == 404
