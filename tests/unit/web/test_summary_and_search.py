"""The shell every page shares, in-process (TestClient) over the session's real Redis: the summary
bar's figures (processes, busy/total slots, utilization, enqueued, retries, dead) on every page and
none on the error pages; the header search (a generated jid to its page, text to the matches in a
queue, retry and dead entry, the budget and "continue", nothing found); relative times."""

from __future__ import annotations

import html
import json
import re
import time

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.ops import search as search_ops
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.web import create_app, summary
from cogworker.web.render import relative, time_tag
from tests.support.set_entries import add, dead_job, job
from tests.support.web_requests import SCRIPT


def presence(r: redis.Redis, identity: str, busy: int, concurrency: int, async_slots: int = 0) -> None:
    info = {"hostname": "box", "pid": 1, "concurrency": concurrency, "async_concurrency": async_slots}
    r.hset(keys.process(identity), mapping={"info": json.dumps(info), "busy": busy, "beat": 1})
    r.sadd(keys.PROCESSES, identity)


def figures(text: str) -> dict[str, str]:
    bar = text.split('<nav class="summary" id="summary" data-live')[1].split("</nav>")[0]
    return {
        name: html.unescape(value) for name, value in re.findall(r'data-figure="(\w+)"><b>(.*?)</b>', bar)
    }


def test_the_summary_bar_counts_what_redis_holds_on_every_page(client: TestClient, r: redis.Redis) -> None:
    presence(r, "a", busy=3, concurrency=5)
    presence(r, "b", busy=1, concurrency=2, async_slots=3)
    r.sadd(keys.PROCESSES, "gone")  # registered, its presence expired: not live
    for queue, count in (("mail", 4), ("low", 2)):
        r.sadd(keys.QUEUES, queue)
        r.lpush(keys.queue(queue), *[codec.dumps(job(f"{queue}{n}")) for n in range(count)])
    for n in range(2):
        add(r, keys.RETRY, dead_job(f"r{n}"), float(n))
    add(r, keys.DEAD, dead_job("d0"), 1.0)
    want = {
        "processes": "2",
        "slots": "4 / 10",
        "utilization": "40 %",
        "enqueued": "6",
        "retries": "2",
        "dead": "1",
    }
    for path in ("/", "/busy", "/queues", "/retries", "/dead", "/periodic", "/batches", "/search?q=x"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert figures(response.text) == want, path
    links = client.get("/queues").text.split('id="summary"')[1].split("</nav>")[0]
    assert 'href="/busy"' in links and 'href="/queues"' in links and 'href="/dead"' in links


def test_no_process_no_slots_and_wrong_types_still_draw_the_bar(client: TestClient, r: redis.Redis) -> None:
    r.set(keys.DEAD, "not a set")
    assert figures(client.get("/queues").text) == {
        "processes": "0",
        "slots": "0 / 0",
        "utilization": "\N{EN DASH}",
        "enqueued": "0",
        "retries": "0",
        "dead": "0",
    }


def test_error_pages_have_no_summary_bar(client: TestClient) -> None:
    assert 'id="summary"' not in client.get("/no-such-page").text
    down = TestClient(create_app(load_settings(redis_url="redis://127.0.0.1:1/0")))
    response = down.get("/queues")
    assert response.status_code == 503 and "reach Redis at" in response.text
    assert 'id="summary"' not in response.text and 'id="header-search"' in response.text


def test_a_generated_jid_goes_to_its_page_and_text_searches_the_arguments(
    client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_ops, "BUDGET_S", 60.0)  # every place read: the budget is tested below
    jid = "0123456789abcdef01234567"
    response = client.get(f"/search?q={jid}")
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/{jid}"
    r.sadd(keys.QUEUES, "mail")
    r.lpush(keys.queue("mail"), codec.dumps(job("q1", args=["acme-42", SCRIPT])))
    add(r, keys.RETRY, dead_job("r1", args=[{"customer": "acme-42"}]), time.time() + 630)
    add(r, keys.DEAD, dead_job("d1", args=["acme-42"]), time.time() - 600)
    add(r, keys.DEAD, dead_job("d2", args=["acme-7"]), time.time() - 60)
    text = client.get("/search", params={"q": "acme-42"}).text
    rows = dict(re.findall(r'<tr data-place="([^"]+)" data-jid="([^"]*)">', text))
    assert rows == {"queue:mail": "q1", "retry": "r1", "dead": "d1"}
    assert "3 matches" in text and "<script>alert" not in text
    assert 'href="/queues/mail"' in text and 'href="/jobs/q1"' in text
    assert re.search(r'href="/dead/[^"]+-d1"', text) and re.search(r'href="/retries/[^"]+-r1"', text)
    assert "in 10 min" in text and "10 min ago" in text  # when the retry is due, when d1 died
    assert 'id="jid-link"' in text  # "acme-42" could be a jid a caller chose
    header = text.split('id="header-search"')[1].split(">")[0]
    assert 'value="acme-42"' in header  # the box keeps what was searched
    nothing = client.get("/search", params={"q": "no-such-customer"}).text
    assert "No job's arguments or class holds “no-such-customer”" in nothing
    assert 'id="search-continue"' not in nothing


def test_a_spent_budget_says_so_and_continues(
    client: TestClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_ops, "BUDGET_S", 0.0)
    monkeypatch.setattr(search_ops, "SLICE", 3)
    for n in range(5):
        add(r, keys.DEAD, dead_job(f"d{n}", args=["needle"]), float(n))
    first = client.get("/search", params={"q": "needle"}).text
    assert 'id="search-budget"' in first and "ran out before every place was read" in first
    link = html.unescape(re.search(r'href="([^"]+)" rel="next" id="search-continue"', first).group(1))
    assert "place=dead" in link and "at=3" in link
    rest = client.get(link).text
    assert 'id="search-budget"' not in rest and len(re.findall(r"<tr data-place", rest)) == 2
    assert "Not valid" not in rest and 'id="bad-cursor"' not in rest
    bad = client.get("/search", params={"q": "needle", "place": "queue:nope", "at": "1"}).text
    assert 'id="bad-cursor"' in bad


def test_a_too_long_search_is_refused_and_an_empty_one_explains(client: TestClient) -> None:
    assert "at most 200 characters" in client.get("/search", params={"q": "x" * 201}).text
    assert "Type a jid to go to its job" in client.get("/search").text


def test_times_read_relative_with_the_exact_utc_time_on_hover() -> None:
    assert relative(26 * 60 + 5) == "in 26 min" and relative(-180) == "3 min ago"
    assert relative(-0.2) == "now" and relative(-45) == "45 s ago" and relative(7500) == "in 2 h 5 min"
    assert relative(-30 * 3600) == "30 h ago" and relative(-5 * 86400) == "5 days ago"
    tag = str(time_tag(1_764_758_668.0, now=1_764_758_668.0 - 1560.0))
    assert tag == (
        '<time datetime="2025-12-03T10:44:28Z"><span class="ago" title="2025-12-03 10:44:28 UTC">'
        "in 26 min</span></time>"
    )
    assert ">2025-12-03 10:44:28<" in str(time_tag(1_764_758_668.0, absolute=True))
    assert ">2024-12-03<" in str(time_tag(1_733_222_668.0, now=1_764_758_668.0))  # past 60 days: the date


def test_the_bar_costs_the_same_commands_whatever_the_sets_hold(r: redis.Redis) -> None:
    presence(r, "a", busy=1, concurrency=5)
    r.sadd(keys.QUEUES, "mail", "low")

    def commands() -> dict[str, int]:
        before = {k: int(v["calls"]) for k, v in r.info("commandstats").items()}
        assert summary.read(r).processes == 1
        after = {k: int(v["calls"]) for k, v in r.info("commandstats").items()}
        changed = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        changed.pop("cmdstat_info", None)  # this test's own INFO
        return changed

    small = commands()
    pipe = r.pipeline(transaction=False)
    for n in range(5_000):
        pipe.zadd(keys.DEAD, {codec.dumps(dead_job(f"d{n}")): float(n)})
    pipe.execute()
    # One SMEMBERS per registry, one ZCARD per set, an HMGET per process and an LLEN per queue.
    assert (
        small
        == commands()
        == {
            "cmdstat_smembers": 2,
            "cmdstat_zcard": 2,
            "cmdstat_hmget": 1,
            "cmdstat_llen": 2,
        }
    )
