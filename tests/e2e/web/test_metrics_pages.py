"""The Metrics pages in Chromium, over minute hashes written in the workers' layout
(tests/support/metrics_data.py): a busy class failing 1 % of its runs, a slow one, one that ran only
hours ago, two queues and a deploy marker. Desktop (1280 and 1440 px) and phone (375 px) shots; every
column on screen at 1280 px; sorting and ranges through the links; the charts' tables holding the
charts' numbers; failures visible at 1 %; no console error or CSP violation.

The UI server is shared by the module and keeps finished minutes it has read, so every minute is
written once, before the first page is loaded.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
import redis
from playwright.sync_api import Page

from cogworker.store import metrics_layout as layout
from tests.support.browser import SCREENSHOTS, Watched, screenshots
from tests.support.metrics_data import ClassMinute, deploy_mark, write_minutes, write_queue_minutes
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow

BUSY = "billing.invoices.render_invoice_pdf"
SLOW = "reports.nightly.rebuild_search_index"
OLD = "crm.sync_contact"


def busy_minute(minute: int) -> ClassMinute:
    runs = 400 + (minute * 37) % 200
    return ClassMinute([3.0 + (i % 40) for i in range(runs)], failed=runs // 100)  # 1 %


@pytest.fixture(scope="module")
def data(web_redis: RedisServer) -> Iterator[float]:
    # The minutes up to now, taken when the data is written (not when the module is imported: a
    # long suite imports it many minutes before it runs).
    last = layout.minute_of(time.time())
    eight_hours = list(range(last - 479, last + 1))
    with web_redis.client() as client:
        write_minutes(
            client,
            eight_hours,
            {
                BUSY: busy_minute,
                SLOW: lambda m: ClassMinute([2400.0, 3100.0, 9000.0] if m % 3 == 0 else []),
                OLD: lambda m: ClassMinute([80.0] * 5 if last - 200 <= m < last - 170 else [], failed=1),
            },
        )
        write_queue_minutes(client, eight_hours, "default", lambda m: 100 + (m % 9) * 60)
        write_queue_minutes(client, eight_hours, "reports", lambda m: 4000 if m % 30 < 5 else 0)
        marked = (last - 25) * 60 + 20.0
        deploy_mark(client, marked, "v1.2", by="deploy.sh")
        yield marked


def order(page: Page) -> list[str]:
    return [
        str(name)
        for name in page.eval_on_selector_all(
            "#classes tbody tr", "rows => rows.map(r => r.getAttribute('data-class'))"
        )
    ]


def assert_columns_on_screen(page: Page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    rights = page.eval_on_selector_all(
        "#classes thead th", "ths => ths.map(th => th.getBoundingClientRect().right)"
    )
    assert rights and max(rights) <= width, f"a column ends at {max(rights)} px of {width}"
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_metrics_page_at_desktop_and_phone_width(page: Watched, data: float) -> None:
    p = page.page
    response = p.goto("/metrics")
    assert response is not None and response.status == 200
    assert order(p) == [BUSY, SLOW]  # OLD ran more than an hour ago
    for width in (1280, 1440):
        assert_columns_on_screen(p, width)
    screenshots(page, "metrics")
    p.set_viewport_size({"width": 1440, "height": 900})
    p.screenshot(path=str(SCREENSHOTS / "metrics-1440.png"), full_page=True)
    assert "v1.2" in p.inner_text("#deploy-marks") and "deploy.sh" in p.inner_text("#deploy-marks")
    assert p.locator("#queue-latency svg .marker").count() == 1
    assert not page.problems()


def test_sorting_by_headings_and_ranges_by_links(page: Watched, data: float) -> None:
    p = page.page
    p.goto("/metrics?range=8")
    assert order(p) == [BUSY, SLOW, OLD]
    p.click('#classes th a[data-sort="p95"]')
    assert "sort=p95" in p.url and order(p) == [SLOW, OLD, BUSY]
    assert p.get_attribute('#classes th:has(a[data-sort="p95"])', "aria-sort") == "descending"
    p.click('#classes th a[data-sort="p95"]')  # again: the opposite order
    assert "dir=asc" in p.url and order(p) == [BUSY, OLD, SLOW]
    p.click('#classes th a[data-sort="name"]')
    assert order(p) == sorted([BUSY, SLOW, OLD])
    p.click('nav[aria-label="Range"] a:text-is("4 h")')
    assert "range=4" in p.url and "sort=name" in p.url and order(p) == sorted([BUSY, SLOW, OLD])
    p.click('nav[aria-label="Range"] a:text-is("1 h")')
    assert order(p) == sorted([BUSY, SLOW])
    assert not page.problems()


def test_class_page_charts_tables_failures_and_markers(page: Watched, data: float) -> None:
    p = page.page
    p.goto("/metrics?range=4")
    p.click(f'#classes a:text-is("{BUSY}")')
    assert p.locator("main h1").inner_text() == BUSY and "range=4" in p.url
    # The screen-reader table holds the chart's numbers: each minute as written.
    p.click("#throughput summary")
    rows = p.eval_on_selector_all(
        "#throughput-data tbody tr",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent.trim()))",
    )
    assert len(rows) == 240
    for cells in (rows[0], rows[100], rows[-20]):  # by each row's own minute: the clock may have moved on
        moment = dt.datetime.strptime(cells[0], "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC)
        expected = busy_minute(int(moment.timestamp()) // 60)
        assert cells[1:] == [f"{len(expected.durations_ms):,}", str(expected.failed)], cells
    # Failures are on their own scale: a 1 % failure rate draws bars most of the small panel high.
    bars = p.locator("#throughput svg:nth-of-type(2) rect.bar-failed")
    assert bars.count() == sum(1 for cells in rows if cells[2] != "0") >= 238  # one per minute with failures
    heights = p.eval_on_selector_all(
        "#throughput svg:nth-of-type(2) rect.bar-failed",
        "rs => rs.map(r => r.getBoundingClientRect().height)",
    )
    assert min(heights) >= 10, heights[:5]
    # The deploy marker is drawn on every panel of every time chart, and labelled.
    assert p.locator("#throughput .marker").count() == 2 and p.locator("#timing .marker").count() == 1
    assert p.locator("#throughput svg:first-of-type .marker text").text_content() == "v1.2"
    assert "UTC" in (p.locator("#throughput svg:last-of-type .x-caption").text_content() or "")
    labels = p.eval_on_selector_all("#histogram-data tbody th", "ths => ths.map(t => t.textContent)")
    assert any(label.startswith("≤ ") and label.endswith(" ms") for label in labels)
    p.click("#throughput summary")  # closed again, for a shot of the charts
    screenshots(page, "metrics-class")
    p.emulate_media(color_scheme="dark")
    screenshots(page, "metrics-class-dark")
    assert not page.problems()


def test_damaged_data_shows_a_note(page: Watched, rc: redis.Redis, data: float) -> None:
    """Written after the other tests' reads: the damaged minute is the current one, never cached."""
    now = layout.minute_of(time.time())
    rc.hset(layout.jobs_key(now), f"{BUSY}|p", "plenty")
    p = page.page
    response = p.goto("/metrics")
    assert response is not None and response.status == 200
    assert "Some data was skipped" in p.inner_text("#metrics-notes")
    assert BUSY in order(p)
    rc.hdel(layout.jobs_key(now), f"{BUSY}|p")
    assert not page.problems()
