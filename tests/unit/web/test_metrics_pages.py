"""/metrics and /metrics/job/<class> through Starlette's TestClient, over minute hashes written in the
workers' layout: the empty state, the table and its sorting links, ranges, a class's charts with
their tables, damaged data as a note (never a 500), and the dashboard's history chart."""

from __future__ import annotations

import re
import time

import redis
from starlette.testclient import TestClient

from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.store import metrics_layout as layout
from cogworker.web import create_app
from tests.support.metrics_data import ClassMinute, deploy_mark, write_minutes, write_queue_minutes
from tests.support.redis_server import free_port


def hour() -> list[int]:
    """The last hour's minutes, up to now (taken per test: a long suite imports this module many
    minutes before it runs)."""
    last = layout.minute_of(time.time())
    return list(range(last - 59, last + 1))


def fill(r: redis.Redis) -> list[int]:
    """Writes an hour of three classes and a queue; returns its minutes."""
    minutes = hour()
    write_minutes(
        r,
        minutes,
        {
            "app.Fast": lambda m: ClassMinute([2.0] * 300, failed=3),  # a 1 % failure rate
            "app.Slow": lambda m: ClassMinute([1500.0] * 4),
            "app.Rare": lambda m: ClassMinute([40.0] if m == minutes[20] else []),
        },
    )
    write_queue_minutes(r, minutes, "default", lambda m: 250 if m % 2 else 0)
    deploy_mark(r, time.time() - 900, "v1.2", by="ci")
    return minutes


def classes_in_order(html: str) -> list[str]:
    return re.findall(r'<tr data-class="([^"]+)"', html)


def test_empty_state_says_how_data_gets_there(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert "No job metrics in the last 1 h" in response.text and "COGWORKER_METRICS" in response.text
    assert 'href="/metrics"' in client.get("/").text  # in the navigation


def test_the_table_sorts_by_any_column_through_links(client: TestClient, r: redis.Redis) -> None:
    fill(r)
    page = client.get("/metrics").text
    assert classes_in_order(page) == ["app.Fast", "app.Slow", "app.Rare"]  # most processed first
    assert 'aria-sort="descending"' in page
    link = re.search(r'href="([^"]*sort=p95[^"]*)"', page)
    assert link is not None and "dir=desc" in link.group(1)
    by_p95 = client.get(link.group(1).replace("&amp;", "&")).text
    assert classes_in_order(by_p95) == ["app.Slow", "app.Rare", "app.Fast"]
    by_name = client.get("/metrics?sort=name&dir=asc").text
    assert classes_in_order(by_name) == ["app.Fast", "app.Rare", "app.Slow"]
    assert classes_in_order(client.get("/metrics?sort=bogus&dir=x").text) == [
        "app.Fast",
        "app.Slow",
        "app.Rare",
    ]
    row = re.search(r'<tr data-class="app.Fast">.*?</tr>', page, re.S)
    assert row is not None and '<td class="num error-text" data-label="Failure rate">1 %</td>' in row.group(0)


def test_ranges_and_a_bad_range(client: TestClient, r: redis.Redis) -> None:
    fill(r)
    for hours in (1, 4, 8):
        page = client.get(f"/metrics?range={hours}").text
        assert f"with runs in the last {hours} h" in page
        assert f'aria-current="true">{hours} h' in page
    assert "in the last 1 h" in client.get("/metrics?range=999").text


def test_queue_latency_chart_and_markers(client: TestClient, r: redis.Redis) -> None:
    fill(r)
    page = client.get("/metrics").text
    assert 'id="queue-latency"' in page and "time (UTC)" in page
    assert '<tr data-queue="default">' in page
    assert "v1.2" in page and "by ci" in page
    assert page.count('class="marker"') == 1


def test_a_class_page_has_its_series_histogram_and_tables(client: TestClient, r: redis.Redis) -> None:
    fill(r)
    page = client.get("/metrics/job/app.Fast?range=1").text
    for chart_id in ("throughput", "timing", "histogram"):
        assert f'id="{chart_id}"' in page and f'id="{chart_id}-data"' in page
    assert "≤ 2 ms" in page  # the bucket the 2 ms runs fall in
    assert "failed per minute (own scale)" in page
    assert page.count('class="marker"') == 3  # the deploy on both time charts' panels
    table = re.search(r'<table id="throughput-data">.*?</table>', page, re.S)
    assert table is not None and table.group(0).count("<tr>") == 61  # a heading and 60 minutes


def test_a_class_without_runs_and_a_class_name_with_odd_characters(
    client: TestClient, r: redis.Redis
) -> None:
    minutes = fill(r)
    page = client.get("/metrics/job/app.Nothing").text
    assert "No runs of app.Nothing recorded" in page
    write_minutes(r, minutes[-2:], {"app/odd <name>": lambda m: ClassMinute([5.0])})
    listed = client.get("/metrics").text
    assert "/metrics/job/app%2Fodd%20%3Cname%3E" in listed and "app/odd &lt;name&gt;" in listed
    odd = client.get("/metrics/job/app%2Fodd%20%3Cname%3E")
    assert odd.status_code == 200 and '<span class="value" id="sum-processed">2</span>' in odd.text


def test_damaged_data_is_a_note_not_a_500(client: TestClient, r: redis.Redis) -> None:
    minutes = fill(r)
    r.hset(layout.jobs_key(minutes[3]), "app.Fast|p", "many")
    r.delete(layout.queues_key(minutes[4]))
    r.lpush(layout.queues_key(minutes[4]), "x")
    r.delete(layout.marks_key())
    r.set(layout.marks_key(), "oops")
    for path in ("/metrics", "/metrics/job/app.Fast"):
        response = client.get(path)
        assert response.status_code == 200
        assert "Some data was skipped" in response.text
        assert layout.marks_key() in response.text
    assert layout.queues_key(minutes[4]) in client.get("/metrics").text


def test_the_dashboard_history_chart_has_axes_and_a_table(client: TestClient, r: redis.Redis) -> None:
    r.set(keys.stat_processed_day(time.strftime("%Y-%m-%d", time.gmtime())), 5000)
    r.set(keys.stat_failed_day(time.strftime("%Y-%m-%d", time.gmtime())), 50)
    page = client.get("/?days=7").text
    assert 'id="history-chart"' in page and "day (UTC)" in page
    table = re.search(r'<table id="history-chart-data">.*?</table>', page, re.S)
    assert table is not None and table.group(0).count("<tr>") == 8
    assert "5,000" in table.group(0) and ">50<" in table.group(0)
    assert "failed per day (own scale)" in page


def test_redis_down_is_the_ui_s_error_page_on_both_metrics_pages() -> None:
    settings = load_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout_s=1.0)
    client = TestClient(create_app(settings))
    for path in ("/metrics", "/metrics/job/app.Fast"):
        response = client.get(path)
        assert response.status_code == 503 and "reach Redis" in response.text, path
