"""The dashboard while a real swarm works: with Live on, the counters move and the live chart gets
its points through background refreshes, without the page reloading; and an interval tampered with in
localStorage still can't make the page poll faster than the server's minimum (Sidekiq's
CVE-2023-26141 was a dashboard polling as fast as a stored value said).
"""

from __future__ import annotations

import contextlib

import demo_jobs
import pytest
import redis
from playwright.sync_api import Browser, Page

from cogworker.settings import Settings
from tests.support.browser import Watched, watched_page
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, stays
from tests.support.web_server import WebServer

pytestmark = pytest.mark.slow

JOBS = 12
INTERVAL = "cogworker.liveInterval"
# Long enough for a page polling at the minimum to refresh twice.
WINDOW_S = 4.5


def refreshes(page: Page) -> int:
    return int(page.get_attribute("body", "data-refreshed") or 0)


def chart_values(page: Page) -> list[float]:
    """The live chart's processed line as heights above its baseline (0: nothing that poll)."""
    points = page.get_attribute("#live-chart .line-processed", "points") or ""
    height = float(page.evaluate("document.getElementById('live-chart').viewBox.baseVal.height"))
    return [height - float(pair.split(",")[1]) for pair in points.split()]


def test_counters_and_chart_move_through_live_refresh_without_a_reload(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    p = page.page
    p.goto("/")
    p.evaluate(f"localStorage.setItem('{INTERVAL}', '2')")  # the fastest the server allows
    p.reload()
    before = int(p.get_attribute("#totals", "data-processed") or 0)
    assert p.inner_text("#processed-total") == f"{before:,}"
    p.evaluate("window.__noReload = 1")
    p.click("#live-toggle")
    assert p.get_attribute("#live-toggle", "aria-pressed") == "true"

    for i in range(JOBS):
        demo_jobs.record.perform_async(f"live-{i}")
    wait_until(
        lambda: p.inner_text("#processed-total") == f"{before + JOBS:,}",
        timeout=20,
        interval=0.1,
        message=f"#processed-total to show {before + JOBS} (it shows {p.inner_text('#processed-total')})",
    )
    assert p.get_attribute("#totals", "data-processed") == str(before + JOBS)
    assert refreshes(p) > 0
    assert p.evaluate("window.__noReload") == 1, "the page was reloaded"
    wait_until(lambda: any(v > 0 for v in chart_values(p)), timeout=10, message="a point above the baseline")
    assert p.inner_text("#live-status").startswith("last poll:")
    assert rc.llen("test:ran") >= JOBS
    assert not page.problems()


def test_a_tampered_interval_still_polls_no_faster_than_the_servers_minimum(
    browser: Browser, ui: WebServer
) -> None:
    """Each tampered value in its own browser context (its own localStorage), all watched at once."""
    tampered = ("0", "0.01", "-5", "fast")
    with contextlib.ExitStack() as stack:
        pages = [stack.enter_context(watched_page(browser, ui.url)) for _ in tampered]
        minimum = 0
        for watched, value in zip(pages, tampered, strict=True):
            p = watched.page
            p.goto("/")
            minimum = int(p.get_attribute("body", "data-live-min") or 0)
            p.evaluate(f"localStorage.setItem('{INTERVAL}', {value!r})")
            p.reload()
            p.click("#live-toggle")
            assert float(p.get_attribute("body", "data-live-interval") or 0) >= minimum, value
        assert minimum >= 2
        at_most = int(WINDOW_S // minimum) + 1
        stays(
            lambda: all(refreshes(w.page) <= at_most for w in pages),
            WINDOW_S,
            f"at most {at_most} refreshes in {WINDOW_S} s on every page",
        )
        # "0.01" is clamped up to the minimum, not ignored: that page did poll.
        assert refreshes(pages[1].page) >= 1
        for watched in pages:
            assert not watched.problems()
