"""The batch page's "Release holds" button, clicked in a real browser: a batch held by an app's
process SIGKILLed inside `with cogworker.batch()` (its lease would last an hour) shows who holds it;
the button asks first, then releases the hold, and the page shows the batch held by nothing."""

from __future__ import annotations

import pytest
import redis
from playwright.sync_api import Page

from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.batches import stuck_batch
from tests.support.browser import Watched
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow


def flash_ok(page: Page) -> str:
    """The success flash the action left (it fails on an error flash, with its text)."""
    page.wait_for_selector(".flash")
    errors = page.locator(".flash-error").all_inner_texts()
    assert not errors, f"the action failed: {errors}"
    return page.locator(".flash-ok").first.inner_text()


def test_release_holds_frees_a_batch_held_by_a_killed_app(
    page: Watched, web_redis: RedisServer, rc: redis.Redis, web_settings: Settings
) -> None:
    bid = stuck_batch(web_redis.url, "stuck-in-ui")
    p = page.page
    p.goto(f"/batches/{bid}")
    held = p.locator("#holds")
    assert "lease:" in held.inner_text(), p.inner_text("main")
    held.get_by_role("button", name="Release holds", exact=True).click()
    p.get_by_role("button", name="Yes, do it").click()  # it asks first
    assert flash_ok(p) == f"Batch {bid}: released 1 hold(s)."
    assert p.locator("#holds").count() == 0
    assert rc.hget(keys.batch(bid), "holds") == "0" and rc.zcard(keys.BATCH_LEASES) == 0
    assert not page.problems()
