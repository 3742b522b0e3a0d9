"""The Periodic pages and "Recent actions" in Chromium, against `cogworker web` and a real swarm whose
app has an entry firing every second (tests/apps/tick_periodic.py) beside the showcase's two.

"Enqueue now" stays inside the table at 1280 px, even beside a long job name and arguments; the last
slot reads "enqueued" with its jid linked; pausing asks first, then the entry's slots read "paused"
on the listing and on its own page until it is resumed; every action shows on /actions. Screenshots
of each page at desktop and 375 px go to .test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from playwright.sync_api import Page

from cogworker.store import keys
from tests.support.browser import Watched, screenshots
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm

pytestmark = pytest.mark.slow

SWARM_ENV = {
    "COGWORKER_REQUIRE": "demo_jobs,web_showcase,tick_periodic",
    "COGWORKER_POLL_INTERVAL_S": "0.2",
    "COGWORKER_PERIODIC_CHECK_INTERVAL_S": "0.2",
}
TICK = "tick_periodic.tick"
ROW = f'tr[data-entry="{TICK}"]'


def long_entry(rc: redis.Redis) -> None:
    """A registration as wide as real ones get: a long job path, arguments and a zone name."""
    registration = {
        "job": "billing.reports.monthly.regional_revenue_rollup_with_currency_normalisation",
        "cron": "15 4 1 * *",
        "tz": "America/Argentina/ComodRivadavia",
        "queue": "reports-low-priority",
        "until_executed": True,
        "arguments": json.dumps(
            {"args": ["EMEA", "x" * 120], "kwargs": {"currency": "EUR", "dry_run": False}}
        ),
    }
    rc.hset(keys.PERIODIC_ENTRIES, "monthly-regional-revenue-rollup", json.dumps(registration))


def enqueue_buttons(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(
        """() => Array.from(document.querySelectorAll('#periodic td.actions button'))
            .filter(b => b.textContent.trim() === 'Enqueue now')
            .map(b => {
              const r = b.getBoundingClientRect();
              const box = b.closest('.table-scroll') || document.documentElement;
              const c = box.getBoundingClientRect();
              return {right: r.right, width: r.width, boxRight: c.right,
                      scrollWidth: box.scrollWidth, clientWidth: box.clientWidth};
            })"""
    )
    return found


def last_outcome(page: Page) -> str | None:
    page.reload()
    badge = page.locator(f"{ROW} td.last-slot .outcome")
    return badge.get_attribute("data-outcome") if badge.count() else None


def test_periodic_pages_pause_resume_and_recent_actions(page: Watched, swarm: Swarm, rc: redis.Redis) -> None:
    long_entry(rc)
    p = page.page
    p.goto("/periodic")
    wait_until(
        lambda: last_outcome(p) == "enqueued", timeout=20, message="the tick entry's last slot enqueued"
    )
    jid_link = p.locator(f"{ROW} td.last-slot a.jid")
    assert (jid_link.get_attribute("href") or "").startswith("/jobs/")

    # 1280 px: every "Enqueue now" inside its table, and the table not scrolled sideways.
    buttons = enqueue_buttons(p)
    assert len(buttons) == 4, buttons
    for box in buttons:
        assert box["width"] > 0 and box["right"] <= box["boxRight"] <= 1280, box
        assert box["scrollWidth"] <= box["clientWidth"], box

    p.locator(f"{ROW} button", has_text="Pause").click()
    assert "Pause periodic entry tick_periodic.tick?" in p.locator(".question").inner_text()
    p.locator("button", has_text="Yes, do it").click()
    assert "paused; its slots are recorded as paused" in p.locator(".flash").inner_text()
    assert p.locator(f"{ROW} .badge", has_text="paused").count() == 1
    wait_until(lambda: last_outcome(p) == "paused", timeout=20, message="the tick entry's slot paused")
    screenshots(page, "periodic-paused")

    p.locator(f"{ROW} td.name a").click()
    wait_until(
        lambda: p.reload() is not None and p.locator('#runs [data-outcome="paused"]').count() >= 2,
        timeout=20,
        message="two paused slots in the entry's runs",
    )
    assert p.locator('#runs [data-outcome="enqueued"]').count() >= 1
    screenshots(page, "periodic-entry")
    p.locator(".entry-actions button", has_text="Resume").click()
    assert "resumed; its next slot runs as planned" in p.locator(".flash").inner_text()

    p.goto("/periodic")
    wait_until(lambda: last_outcome(p) == "enqueued", timeout=20, message="enqueued again after the resume")

    p.locator("nav a", has_text="Recent actions").click()
    rows = p.locator("#actions tbody tr")
    assert rows.count() == 2
    assert "resumed" in rows.nth(0).inner_text() and "paused" in rows.nth(1).inner_text()
    assert rows.nth(0).locator("td.user").inner_text() == "anonymous"
    assert "ago" in rows.nth(0).locator("td.when").inner_text()
    screenshots(page, "actions")
