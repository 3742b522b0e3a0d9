"""Queues, a queue's jobs, Batches and a batch's page in Chromium against a real swarm: which queues
the swarm's live processes read and which are unserved (the dashboard counts those), the queue page's
"next to run first" order and its Last link, a batch whose members fail in retry shown failing with
their error; and at 1280 px every important column lies inside the viewport, with long arguments,
descriptions and errors. Each page is shot at desktop and 375 px."""

from __future__ import annotations

import demo_jobs
import pytest
import redis
from playwright.sync_api import Page

import cogworker
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.browser import DESKTOP, Watched, screenshots
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm

pytestmark = pytest.mark.slow

SWARM_ENV = {"COGWORKER_QUEUES": "default,mail"}
LONG = "uploads/2026/12/03/" + "very-long-customer-supplied-file-name-without-any-spaces-" * 4 + ".pdf"
# No space and no hyphen: nowhere a browser may break the line unless the page lets it.
UNBROKEN = LONG.replace("/", "_").replace("-", "_")


def inside(page: Page, selector: str) -> int:
    """Assert every element `selector` matches lies inside the 1280-px viewport (none cut off at its
    right edge, none scrolled away sideways); returns how many there are."""
    boxes = page.eval_on_selector_all(
        selector,
        "els => els.map(e => { const r = e.getBoundingClientRect(); "
        "return [e.textContent.trim().slice(0, 40), r.left, r.right]; })",
    )
    assert boxes, f"nothing matches {selector}"
    outside = [box for box in boxes if box[1] < 0 or box[2] > DESKTOP["width"]]
    assert not outside, f"{selector}: off-screen at {DESKTOP['width']} px: {outside}"
    return len(boxes)


def test_queues_show_readers_and_unserved_queues(
    page: Watched, rc: redis.Redis, swarm: Swarm, web_settings: Settings
) -> None:
    for n in range(4):
        demo_jobs.record.set(queue="exports-nobody-reads").perform_async(f"u{n}")
    demo_jobs.record.set(queue=UNBROKEN).perform_async("a queue whose name is longer than a column")
    demo_jobs.record.set(queue="reports-paused").perform_async("held")
    rc.sadd(keys.PAUSED, "reports-paused")
    demo_jobs.record.set(queue="mail").perform_async("sent")
    wait_until(lambda: rc.llen(keys.queue("mail")) == 0, timeout=45, message="the swarm to take mail's job")
    p = page.page
    p.goto("/queues")
    unserved = p.locator('#queues tr[data-queue="exports-nobody-reads"]')
    assert "no live process" in unserved.inner_text() and "unserved" in unserved.inner_text()
    assert unserved.locator("td.state").get_attribute("data-state") == "unserved"
    mail = p.locator('#queues tr[data-queue="mail"]')
    assert "2 processes" in mail.inner_text() and "active" in mail.inner_text()
    paused = p.locator('#queues tr[data-queue="reports-paused"]')
    assert paused.locator("td.state").inner_text() == "paused"
    assert "exports-nobody-reads" in p.inner_text("#unserved-warning")
    assert inside(p, "#queues th") == 6
    inside(p, "#queues td.actions .btn")
    assert inside(p, "#unserved-warning a") == 2
    screenshots(page, "queues-served")

    p.get_by_role("link", name="exports-nobody-reads").first.click()
    assert "no live process fetches from it" in p.inner_text("#queue-state")
    p.goto("/")
    assert int(p.inner_text("#unserved-queues")) >= 1
    p.click("#unserved-queues")
    assert p.url.endswith("/queues")


def test_queue_page_next_to_run_first_last_link_and_columns(
    page: Watched, rc: redis.Redis, swarm: Swarm, web_settings: Settings
) -> None:
    jids = [demo_jobs.record.set(queue="backlog").perform_async(f"{UNBROKEN}_{n}") for n in range(60)]
    p = page.page
    p.goto("/queues/backlog")
    p.get_by_role("link", name="Next to run first").click()
    assert p.locator("#jobs tr[data-jid]").first.get_attribute("data-jid") == jids[0]
    assert inside(p, "#jobs th") == 6
    inside(p, "#jobs td.actions .btn")
    inside(p, "#jobs td.args")
    screenshots(page, "queue-next-first")

    p.get_by_role("link", name="Last »").click()
    assert "order=next" in p.url and "page=3" in p.url
    rows = p.locator("#jobs tr[data-jid]")
    assert rows.count() == 10 and rows.last.get_attribute("data-jid") == jids[-1]
    p.click("a[rel=prev]")
    assert (
        "order=next" in p.url and p.locator("#jobs tr[data-jid]").first.get_attribute("data-jid") == jids[25]
    )


def test_batch_with_failing_members_and_its_columns(
    page: Watched, rc: redis.Redis, swarm: Swarm, web_settings: Settings
) -> None:
    description = "nightly_import_of_every_shop_catalogue_from_" + UNBROKEN
    with cogworker.batch(description) as batch:
        failing = [demo_jobs.boom.perform_async(f"row {n}: {UNBROKEN}") for n in range(3)]
        demo_jobs.record.set(queue="nobody").perform_async("waits")
    wait_until(
        lambda: sum(f'"{jid}"' in raw for raw in rc.zrange(keys.RETRY, 0, -1) for jid in failing) == 3,
        timeout=45,
        message="the batch's members to fail into retry",
    )
    p = page.page
    p.goto("/batches")
    row = p.locator(f'#batches tr[data-bid="{batch.bid}"]')
    assert "running, 3 failing" in row.inner_text()
    assert inside(p, "#batches th") == 9
    screenshots(page, "batches-failing")

    row.get_by_role("link").first.click()
    assert p.inner_text("#batch-state") == "running, 3 failing"
    assert "3 of them failing and retrying" in p.inner_text("#batch-members")
    for jid in failing:
        assert "ValueError: row" in p.inner_text(f'#failures tr[data-member="{jid}"]')
    assert inside(p, "#failures th") == 3
    inside(p, "#failures td")
    screenshots(page, "batch-failing")

    pending = p.locator("#batch-pending li")
    assert pending.count() == 4
    waiting = [m for m in pending.evaluate_all("els => els.map(e => e.dataset.member)") if m not in failing]
    p.locator(f'#batch-pending li[data-member="{waiting[0]}"] a').click()
    assert p.url.endswith(f"/jobs/{waiting[0]}") and "nobody" in p.inner_text("main")
