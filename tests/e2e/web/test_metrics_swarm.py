"""The Metrics pages over what a real swarm recorded: its workers run two job classes (one always
failing), flush their minute counts every second, and a deploy marker is added through the API. The
page shows each class's exact counts, the class page draws its charts with the marker on them, and
the `deploy-mark` the CLI adds is listed too."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import metrics_layout as layout
from tests.support.browser import Watched, screenshots
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import Swarm

pytestmark = pytest.mark.slow

SWARM_ENV = {"COGWORKER_REQUIRE": "demo_jobs", "COGWORKER_METRICS_FLUSH_S": "1"}
OK, FAILING = demo_jobs.record.name, demo_jobs.boom_once.name


def recorded(r: redis.Redis, name: str, suffix: str) -> int:
    """The field's sum over the minutes of the last quarter hour (the test's runs are all there)."""
    now = layout.minute_of(time.time())
    pipe = r.pipeline(transaction=False)
    for minute in range(now - 15, now + 2):
        pipe.hget(layout.jobs_key(minute), layout.field(name, suffix))
    return sum(int(value) for value in pipe.execute() if value is not None)


def test_the_metrics_pages_show_what_a_running_swarm_did(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, web_redis: RedisServer
) -> None:
    for i in range(20):
        demo_jobs.record.perform_async(f"metrics-{i}")
    for i in range(3):
        demo_jobs.boom_once.perform_async(f"metrics-fail-{i}")
    cogworker.deploy_mark("v-live-1", by="test")
    marked = subprocess.run(
        [sys.executable, "-m", "cogworker", "deploy-mark", "v-live-2", "--by", "deploy.sh"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COGWORKER_REDIS_URL": web_redis.url},
    )
    assert marked.returncode == 0, marked.stderr
    wait_until(
        lambda: recorded(rc, OK, "p") == 20 and recorded(rc, FAILING, "f") == 3,
        timeout=30,
        message="the swarm's flushes of 20 runs and 3 failures",
    )

    p = page.page
    p.set_viewport_size({"width": 1280, "height": 900})
    p.goto("/metrics?range=1")
    ok_row = p.locator(f"#classes tbody tr[data-class='{OK}']")
    assert ok_row.locator("[data-label='Processed']").inner_text() == "20"
    assert ok_row.locator("[data-label='Failed']").inner_text() == "0"
    failing_row = p.locator(f"#classes tbody tr[data-class='{FAILING}']")
    assert failing_row.locator("[data-label='Processed']").inner_text() == "3"
    assert failing_row.locator("[data-label='Failure rate']").inner_text() == "100 %"
    marks = p.locator("#deploy-marks").inner_text()
    assert "v-live-1" in marks and "v-live-2" in marks and "deploy.sh" in marks
    screenshots(page, "metrics-swarm")

    ok_row.locator("a").first.click()
    p.wait_for_url(f"**/metrics/job/{OK}**")
    assert p.locator("#sum-processed").inner_text() == "20"
    charts = p.locator("svg")
    assert charts.count() >= 3
    # The markers are drawn on the time charts, labelled.
    assert "v-live-1" in p.locator("svg").first.inner_html()
    # A marker this recent sits at the right edge: its label is drawn on its left, inside the chart.
    outside = p.evaluate(
        """() => Array.from(document.querySelectorAll("svg g.marker text"), t => {
             const box = t.getBoundingClientRect(), svg = t.ownerSVGElement.getBoundingClientRect();
             return box.right > svg.right + 0.5 || box.left < svg.left - 0.5 ? t.textContent : null;
           }).filter(Boolean)"""
    )
    assert not outside, f"marker labels cut at the chart's edge: {outside}"
    screenshots(page, "metrics-swarm-class")
    assert not page.problems(), page.problems()
