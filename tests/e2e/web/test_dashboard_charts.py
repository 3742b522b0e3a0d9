"""The dashboard's charts in Chromium: the History chart's table holds the days' numbers and its
failures have their own scale; the Live chart (static/charts.js, fed by app.js's per-poll points)
draws value ticks, a time axis, failures at 1 % most of their panel high, and the same numbers as a
table. The points are handed over the way app.js hands them (its "cogworker:live-points" event),
so this needs no swarm; tests/e2e/web/test_dashboard_live.py drives the whole loop with one."""

from __future__ import annotations

import datetime as dt

import pytest
import redis

from cogworker.store import keys
from tests.support.browser import Watched

pytestmark = pytest.mark.slow

POINTS = {"processed": [0, 500, 480, 520], "failed": [0, 5, 4, 6]}


def test_history_chart_has_scales_and_its_numbers_as_a_table(page: Watched, rc: redis.Redis) -> None:
    today = dt.datetime.now(dt.UTC).date()
    for back in range(7):
        day = (today - dt.timedelta(days=back)).isoformat()
        rc.set(keys.stat_processed_day(day), 1000 * (back + 1))
        rc.set(keys.stat_failed_day(day), 10 * (back + 1))  # 1 %
    p = page.page
    p.goto("/?days=7")
    rows = p.eval_on_selector_all(
        "#history-chart-data tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    assert rows[-1] == [today.isoformat(), "1,000", "10"] and rows[0][1:] == ["7,000", "70"]
    labels = p.eval_on_selector_all(
        "#history-chart svg:first-of-type .y-label", "ts => ts.map(t => t.textContent)"
    )
    assert labels[0] == "0" and labels[-1] in ("8,000", "10,000")
    heights = p.eval_on_selector_all(
        "#history-chart rect.bar-failed", "rs => rs.map(r => r.getBoundingClientRect().height)"
    )
    assert len(heights) == 7 and min(heights) >= 5  # 10 failures of 1,000 still a visible bar
    assert "day (UTC)" in (p.locator("#history-chart .x-caption").text_content() or "")
    assert not page.problems()


def test_live_chart_draws_axes_failures_on_their_scale_and_a_table(page: Watched) -> None:
    p = page.page
    p.goto("/")
    p.evaluate(
        "points => document.dispatchEvent(new CustomEvent('cogworker:live-points', {detail: points}))", POINTS
    )
    assert p.eval_on_selector_all("#live-chart .y-label", "ts => ts.map(t => t.textContent)") == [
        "0",
        "200",
        "400",
        "600",
    ]
    assert p.eval_on_selector_all("#live-failed-chart .y-label", "ts => ts.map(t => t.textContent)") == [
        "0",
        "5",
        "10",
    ]
    assert "now" in p.eval_on_selector_all("#live-failed-chart .x-label", "ts => ts.map(t => t.textContent)")
    # 6 failed of 520 processed: 60 % of the failures panel's height, not 1 % of the processed one's.
    top, bottom = 14.0, 74.0
    last_y = float(
        (p.get_attribute("#live-failed-chart .line-failed", "points") or "").split()[-1].split(",")[1]
    )
    assert (bottom - last_y) / (bottom - top) == pytest.approx(0.6, abs=0.01)
    rows = p.eval_on_selector_all(
        "#live-table tbody tr", "rows => rows.map(r => Array.from(r.cells).slice(1).map(c => c.textContent))"
    )
    assert rows == [["520", "6"], ["480", "4"], ["500", "5"], ["0", "0"]]
    assert p.inner_text("#live-status") == "last poll: 520 processed, 6 failed"
    assert not page.problems()
