"""Every page, with data a real swarm made, at desktop width and at 375 px (a phone): the phone layout
never scrolls sideways, no page logs a console error or a CSP violation, and dark mode is dark.

The shots go to .test-artifacts/screenshots/ (`<page>-desktop.png`, `<page>-phone.png`). With
COGWORKER_UPDATE_DOCS_IMAGES=1 the dashboard's desktop shot is also copied to
docs/images/dashboard.png, the picture the README shows.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from urllib.parse import quote

import demo_jobs
import pytest
import redis
import web_showcase
from playwright.sync_api import Page

import cogworker
from cogworker import codec
from cogworker.ops import periodic as periodic_ops
from cogworker.ops import processes as process_ops
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.browser import Watched, columns_off_screen, screenshots
from tests.support.paths import ROOT
from tests.support.redis_server import wait_until
from tests.support.set_entries import dead_job
from tests.support.swarm import Swarm

pytestmark = pytest.mark.slow

SWARM_ENV = {"COGWORKER_REQUIRE": "demo_jobs,web_showcase", "COGWORKER_CONCURRENCY": "3"}
DOCS_IMAGE = ROOT / "docs" / "images" / "dashboard.png"
DEAD = (
    ("invoices.render_pdf", "TimeoutError", "rendering took longer than 30 s", [18231, "A4"]),
    ("crm.sync_contact", "ConnectionError", "crm.example.com:443: connection refused", ["c-9912"]),
    ("media.transcode", "ValueError", "unsupported codec 'xvid'", ["uploads/clip.avi", {"height": 720}]),
)


def history(r: redis.Redis) -> None:
    """Thirty days of per-day counters (the history chart), and totals that agree with them."""
    today = dt.datetime.now(dt.UTC).date()
    processed = failed = 0
    for back in range(30):
        day = (today - dt.timedelta(days=back)).isoformat()
        weekday = (today - dt.timedelta(days=back)).weekday()
        # A busy week and quiet weekends, a slow growth, and some day-to-day noise.
        done = (5200 if weekday < 5 else 1900) - 35 * back + (back * 7919) % 700
        lost = 15 + (back * 37) % 60 + (140 if back == 9 else 0)
        r.set(keys.stat_processed_day(day), done)
        r.set(keys.stat_failed_day(day), lost)
        processed, failed = processed + done, failed + lost
    r.incrby(keys.STAT_PROCESSED, processed)
    r.incrby(keys.STAT_FAILED, failed)


def fill(r: redis.Redis, swarm: Swarm) -> dict[str, str]:
    """Data on every page, most of it made by the swarm itself. Returns names the pages need."""
    history(r)
    for i in range(25):
        demo_jobs.record.perform_async(f"shot-{i}")
    declined = [web_showcase.charge_card.perform_async(1000 + i, 2599 + i) for i in range(3)]
    for user in range(6):
        web_showcase.send_welcome.perform_async(user)
    web_showcase.send_welcome.perform_in(3600, 42, "reminder")
    demo_jobs.record.perform_in(7200, "later")
    web_showcase.resize_image.perform_async("uploads/cat.jpg", 120)
    r.sadd(keys.PAUSED, "reports")
    web_showcase.nightly_report.perform_async("inventory")
    now = time.time()
    for index, (name, error, message, args) in enumerate(DEAD):
        job = dead_job(f"d{index:023d}", **{"class": name, "args": args, "error_class": error})
        job.update(
            error_message=message, backtrace=[f'  File "{name}.py", line 42, in run', f"{error}: {message}"]
        )
        r.zadd(keys.DEAD, {codec.dumps(job): now - 600 * index})
    wait_until(lambda: r.zcard(keys.RETRY) == 3, timeout=15, message="the declined payments in the retry set")
    wait_until(
        lambda: any(p.running for p in process_ops.processes(r)), timeout=15, message="a job running on /busy"
    )
    wait_until(
        lambda: len(periodic_ops.entries(r)) == 2, timeout=15, message="the periodic entries registered"
    )
    # A batch the swarm runs: one member fails (and is retried), the others succeed.
    with cogworker.batch("nightly import: 40 shops", on_complete=demo_jobs.record) as batch:
        cogworker.push_bulk(demo_jobs.record, [(f"shop-{i}",) for i in range(39)])
        demo_jobs.boom.perform_async("shop 17: feed unreachable")
    dead_key = set_ops.entry_key(now, "d" + "0" * 23)
    return {
        "dead_key": dead_key,
        "jid": str(declined[0]),
        "dead_jid": "d" + "0" * 23,
        "bid": batch.bid,
        "periodic": periodic_ops.entries(r)[0].name,
    }


def show_live_chart(page: Page) -> None:
    """Live on at the fastest interval, with jobs arriving between polls, so the chart has a shape."""
    page.evaluate("localStorage.setItem('cogworker.liveInterval', '2')")
    page.reload()
    page.click("#live-toggle")
    for batch in (6, 14, 9, 17):
        seen = int(page.get_attribute("body", "data-refreshed") or 0)
        for i in range(batch):
            demo_jobs.record.perform_async(f"chart-{batch}-{i}")
        wait_until(
            lambda s=seen: int(page.get_attribute("body", "data-refreshed") or 0) > s,
            timeout=10,
            message="a live refresh",
        )


def test_every_page_at_desktop_and_phone_width(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    names = fill(rc, swarm)
    shots = {
        "busy": "/busy",
        "queues": "/queues",
        "queue": "/queues/mail",
        "retries": "/retries",
        "scheduled": "/scheduled",
        "dead": "/dead",
        "dead-entry": f"/dead/{quote(names['dead_key'], safe='')}",
        "periodic": "/periodic",
        "batches": "/batches",
        "batch": f"/batches/{names['bid']}",
        "job": f"/jobs/{names['jid']}",
        # A jid of digits (all as wide as each other): the widest a jid title gets, on every run.
        "job-dead": f"/jobs/{names['dead_jid']}",
        "retry-groups": "/retries/groups",
        "dead-groups": "/dead/groups",
        "periodic-entry": f"/periodic/entries/{quote(names['periodic'], safe='')}",
        "metrics": "/metrics",
        "search": "/search?q=uploads",
        "actions": "/actions",
    }
    p = page.page
    p.goto("/")
    show_live_chart(p)
    desktop, _ = screenshots(page, "dashboard")
    if os.environ.get("COGWORKER_UPDATE_DOCS_IMAGES") == "1":
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(desktop, DOCS_IMAGE)
    for name, path in shots.items():
        response = p.goto(path)
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        assert p.locator("main h1").count() == 1
        screenshots(page, name)  # leaves the viewport at desktop width, 1280 px
        assert not columns_off_screen(p), f"{path}: columns off-screen at 1280 px: {columns_off_screen(p)}"
    # Each page shows what was put there.
    p.goto("/busy")
    assert "web_showcase.resize_image" in p.inner_text("#running")
    p.goto("/queues")
    assert "paused" in p.inner_text('#queues tr[data-queue="reports"]').lower()
    p.goto("/periodic")
    assert p.locator("#periodic tr[data-entry]").count() == 2
    p.goto("/batches")
    assert p.locator("#batches tr[data-bid]").count() == 1


def background_luminance(page: Page) -> float:
    rgb = page.evaluate(
        """() => getComputedStyle(document.body).backgroundColor.match(/[\\d.]+/g).slice(0, 3).map(Number)"""
    )
    red, green, blue = (channel / 255 for channel in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_dark_mode_follows_the_systems_colour_scheme(page: Watched) -> None:
    p = page.page
    p.emulate_media(color_scheme="light")
    p.goto("/")
    assert background_luminance(p) > 0.7
    p.emulate_media(color_scheme="dark")
    assert background_luminance(p) < 0.25
    screenshots(page, "dashboard-dark")
    assert not page.problems()
