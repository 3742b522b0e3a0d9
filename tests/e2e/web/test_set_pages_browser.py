"""Retries, Scheduled and Dead in a real browser (Chromium, `cogworker web`): at 1280 px every column
heading and every row's action buttons are on screen, even with long class names, arguments and
messages; the Groups view acts on a whole failure after its confirmation; a filter whose matches lie
past the first window is followed to them through its "Continue" links; and the entry page shows a
chained backtrace. Screenshots of each page at desktop and 375 px.

The module has no swarm, so each test empties the module's Redis first.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest
import redis
from playwright.sync_api import Page

from cogworker import codec
from cogworker.api import backtrace
from cogworker.ops import sets as set_ops
from cogworker.store import keys
from tests.support.browser import DESKTOP, Watched, screenshots
from tests.support.set_entries import dead_job

pytestmark = pytest.mark.slow

CLASSES = (
    ("billing.invoices.RenderMonthlyStatementPdfForEnterpriseCustomers", "TimeoutError"),
    ("crm.integrations.salesforce.SynchroniseContactWithExternalAccount", "ConnectionRefusedError"),
    ("media.transcoding.TranscodeUploadedClipToAdaptiveBitrateLadder", "ValueError"),
)


def long_job(n: int, name: str, error: str) -> dict[str, object]:
    return dead_job(
        f"{n:04d}f3a9c2e14b7d8e6f5a4b3c2d",
        **{"class": name},
        args=[{"customer_id": 100_000 + n, "statement": "s3://bucket/statements/2025/11/" + "x" * 80}],
        kwargs={"locale": "en_GB", "notify": ["ops@example.com", "billing@example.com"]},
        error_class=error,
        error_message=f"{error} after 3 attempts: upstream answered 503 Service Unavailable " + "y" * 120,
        queue="critical-enterprise-billing",
        failed_at=time.time() - 3600 + n,
    )


def fill(rc: redis.Redis, key: str, count: int, offset_s: float) -> None:
    now = time.time()
    pipe = rc.pipeline(transaction=False)
    for n in range(count):
        name, error = CLASSES[n % len(CLASSES)]
        job = long_job(n, name, error)
        if key == keys.SCHEDULE:
            job = {k: v for k, v in job.items() if not k.startswith(("error", "failed", "retry"))}
        pipe.zadd(key, {codec.dumps(job): now + offset_s + n * 60})
    pipe.execute()


def assert_on_screen(p: Page, selector: str) -> int:
    """Every element matching `selector` lies inside the 1280-px viewport; returns how many."""
    boxes = [element.bounding_box() for element in p.locator(selector).all()]
    assert boxes, f"nothing matches {selector}"
    for box in boxes:
        assert box is not None and box["x"] >= 0, f"{selector}: {box}"
        assert box["x"] + box["width"] <= DESKTOP["width"], f"{selector} off-screen: {box}"
    return len(boxes)


@pytest.mark.parametrize(
    ("path", "key", "offset_s"),
    [
        ("/retries", keys.RETRY, 60.0),
        ("/scheduled", keys.SCHEDULE, 600.0),
        ("/dead", keys.DEAD, -86_400.0),
    ],
)
def test_every_column_and_row_action_is_on_screen_at_1280(
    page: Watched, rc: redis.Redis, path: str, key: str, offset_s: float
) -> None:
    rc.flushdb()
    fill(rc, key, 30, offset_s)
    p = page.page
    p.goto(path)
    assert p.locator("#entries tbody tr").count() == 25
    assert p.evaluate("document.documentElement.scrollWidth") <= DESKTOP["width"]
    assert_on_screen(p, "#entries thead th")
    buttons = assert_on_screen(p, "#entries td.set-row-actions button")
    assert buttons == 25 * (3 if path == "/retries" else 2)
    name = path.strip("/")
    screenshots(page, f"sets-{name}-wide")
    entry = p.locator("#entries tbody tr").first.locator("td").nth(1).locator("a")
    entry.click()
    p.wait_for_selector("#entry")
    assert_on_screen(p, "#entry .set-entry-actions button")
    assert p.evaluate("document.documentElement.scrollWidth") <= DESKTOP["width"]
    screenshots(page, f"sets-{name}-entry-wide")


def chained_exception() -> BaseException:
    try:
        try:
            {}["statement_total"]
        except KeyError as exc:
            raise RuntimeError("the statement could not be rendered") from exc
    except RuntimeError as outer:
        return outer
    raise AssertionError("unreachable")


def test_the_entry_page_shows_the_chain_root_cause_first(page: Watched, rc: redis.Redis) -> None:
    rc.flushdb()
    lines = backtrace.from_exception(chained_exception())
    job = dead_job("chain0000000000000000000", error_class="RuntimeError", error_message="render failed")
    job[backtrace.FIELD] = backtrace.encode(lines)
    score = time.time()
    rc.zadd(keys.DEAD, {codec.dumps(job): score})
    p = page.page
    p.goto("/dead/" + quote(set_ops.entry_key(score, "chain0000000000000000000"), safe=""))
    shown = p.locator("#backtrace").inner_text()
    assert shown.index("KeyError: 'statement_total'") < shown.index(backtrace.CAUSE)
    assert shown.rstrip().endswith("RuntimeError: the statement could not be rendered")
    assert p.locator("#backtrace .bt-error").count() == 2
    screenshots(page, "sets-entry-backtrace")


def test_a_group_is_retried_whole_after_its_confirmation(page: Watched, rc: redis.Redis) -> None:
    rc.flushdb()
    fill(rc, keys.DEAD, 30, -86_400.0)
    p = page.page
    p.goto("/dead")
    p.get_by_role("link", name="Grouped by failure").click()
    p.wait_for_selector("#groups")
    assert "3 distinct failures among all 30 entries." in p.inner_text("#group-count")
    assert p.locator("#groups tbody tr").count() == 3
    assert_on_screen(p, "#groups td.set-row-actions button")
    screenshots(page, "sets-dead-groups")
    name, error = CLASSES[1]
    row = p.locator(f'#groups tr[data-group="{name}|{error}"]')
    assert row.locator("td.num").inner_text() == "10"
    row.get_by_role("button", name="Retry", exact=True).click()
    question = p.inner_text("main")
    assert f"Retry the 10 entries of the dead set whose job class is '{name}'" in question
    assert rc.zcard(keys.DEAD) == 30  # nothing before the confirmation
    screenshots(page, "sets-dead-group-confirm")
    p.get_by_role("button", name="Yes, do it").click()
    p.wait_for_selector(".flash-ok")
    assert "Retried 10 entries onto their queues" in p.inner_text(".flash-ok")
    assert rc.zcard(keys.DEAD) == 20 and rc.llen(keys.queue("critical-enterprise-billing")) == 10
    assert p.locator("#groups tbody tr").count() == 2


def test_a_filter_is_followed_past_the_first_window_to_its_matches(page: Watched, rc: redis.Redis) -> None:
    rc.flushdb()
    now = time.time()
    pipe = rc.pipeline(transaction=False)
    for n in range(20_000):
        pipe.zadd(keys.DEAD, {codec.dumps(dead_job(f"filler{n:017d}")): now - n})
        if n % 2000 == 1999:
            pipe.execute()
    for n in range(3):  # older than every other entry: the last that newest-first reads
        pipe.zadd(
            keys.DEAD, {codec.dumps(dead_job(f"needle{n:018d}", **{"class": "app.Needle"})): now - 30_000}
        )
    pipe.execute()
    p = page.page
    p.goto("/dead")
    p.fill('input[name="job"]', "Needle")
    p.get_by_role("button", name="Filter").click()
    p.wait_for_selector("#searched")
    found: set[str] = set()
    for _ in range(60):  # 250 ms a page: a slow machine may need a few pages, never 60
        found |= set(p.locator("#entries tbody tr").evaluate_all("rows => rows.map(r => r.dataset.jid)"))
        onward = p.locator("#continue-search")
        if not onward.count():
            break
        assert "match" in p.inner_text("#searched") and "so far" in p.inner_text("#searched")
        onward.click()
        p.wait_for_selector("#searched")
    assert found == {f"needle{n:018d}" for n in range(3)}
    assert p.inner_text("#searched").startswith("Searched entries")  # the last page: the set's end
    screenshots(page, "sets-dead-filter-searched")
