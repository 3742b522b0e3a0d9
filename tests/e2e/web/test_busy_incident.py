"""Busy during an incident, in Chromium against a real swarm: "Pause intake" and "Stop" ask first
(saying how many processes they reach) and act only after "Yes, do it"; the Running table shows
Started and Runtime inside the window at 1280 and 1440 px, long arguments and all; and a Live
refresh keeps each scrolling box's position and the focused button.
"""

from __future__ import annotations

from collections.abc import Iterator

import demo_jobs
import pytest
import redis
from playwright.sync_api import Page

from cogworker.ops import processes as process_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.browser import Watched, screenshots
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm

pytestmark = pytest.mark.slow

LONG_TAG = "nightly-import:" + "/".join(f"region-eu-west-{n}/shop-{n * 7919}" for n in range(8))


def swarm_identities(swarm: Swarm) -> set[str]:
    ids = swarm.identities()
    return {ids[pid] for pid in swarm.current_children().values()}


def quiet(r: redis.Redis, identities: set[str]) -> dict[str, bool]:
    return {p.identity: p.quiet for p in process_ops.processes(r) if p.identity in identities}


@pytest.fixture
def resumed(rc: redis.Redis) -> Iterator[None]:
    """Whatever a test does, the swarm fetches again after it."""
    yield
    process_ops.tell(rc, "resume")


def running_jobs(r: redis.Redis, count: int) -> None:
    for n in range(count):
        demo_jobs.sleepy.perform_async(f"{LONG_TAG}-{n}", 8)
    wait_until(
        lambda: sum(len(p.running) for p in process_ops.processes(r)) >= count,
        timeout=15,
        message=f"{count} jobs running",
    )


def test_pause_intake_asks_first_with_the_count_then_quiets_every_process(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, resumed: None
) -> None:
    identities = swarm_identities(swarm)
    p = page.page
    p.goto("/busy")
    pause = p.get_by_role("button", name="Pause intake…", exact=True)
    # Not the page's first control, and not drawn as a danger.
    first = p.locator("main button").first.inner_text()
    assert first != "Pause intake…" and "danger" not in (pause.get_attribute("class") or "")
    assert pause.bounding_box()["y"] > p.locator("#processes").bounding_box()["y"]  # type: ignore[index]
    pause.click()
    question = p.inner_text(".confirm .question")
    assert question.startswith("Pause intake on all 2 processes?"), question
    assert all(rc.exists(keys.signals(i)) == 0 for i in identities)  # nothing told yet
    screenshots(page, "confirm-pause-intake")
    p.get_by_role("link", name="Cancel").click()
    assert p.url.endswith("/busy") and quiet(rc, identities) == dict.fromkeys(identities, False)

    pause.click()
    p.get_by_role("button", name="Yes, do it").click()
    assert "Pause intake: told 2 processes to quiet" in p.inner_text("#flashes")
    wait_until(
        lambda: quiet(rc, identities) == dict.fromkeys(identities, True), timeout=10, message="all quiet"
    )
    p.get_by_role("button", name="Resume intake", exact=True).click()  # resuming asks nothing
    assert "Resume intake: told 2 processes" in p.inner_text("#flashes")
    wait_until(
        lambda: quiet(rc, identities) == dict.fromkeys(identities, False), timeout=10, message="resumed"
    )
    assert not page.problems()


def visible_in_window(page: Page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    width = page.viewport_size["width"] if page.viewport_size else 0
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_running_table_shows_started_and_runtime_at_desktop_widths(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, width: int
) -> None:
    running_jobs(rc, 2)
    p = page.page
    p.set_viewport_size({"width": width, "height": 900})
    p.goto("/busy")
    assert p.locator("#running tbody tr").count() >= 2
    for selector in ("#running td.started", "#running td.runtime", "#running th:last-child"):
        assert visible_in_window(p, selector), selector
    for table in ("#running", "#processes"):
        box = f"document.querySelector('{table}').closest('.table-scroll')"
        assert p.evaluate(f"{box}.scrollWidth <= {box}.clientWidth + 1"), f"{table} scrolls at {width} px"
    # Ids are cut for the cell with the whole on hover; the arguments wrap inside their column.
    jid_cell = p.locator("#running tbody tr td:nth-child(6) abbr").first
    assert len(jid_cell.inner_text()) == 9 and len(jid_cell.get_attribute("title") or "") == 24
    assert p.locator("#running td.args").first.bounding_box()["height"] > 30  # type: ignore[index]
    if width == 1280:
        screenshots(page, "busy-running")


def test_live_refresh_keeps_the_sideways_scroll_and_the_focus(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    running_jobs(rc, 1)
    p = page.page
    p.set_viewport_size({"width": 720, "height": 900})  # wider than a phone: the tables scroll
    p.goto("/busy")
    p.evaluate("localStorage.setItem('cogworker.liveInterval', '2')")
    p.reload()
    p.click("#live-toggle")
    scroller = "document.querySelector('#processes').closest('.table-scroll')"
    assert p.evaluate(f"{scroller}.scrollWidth > {scroller}.clientWidth")
    identity = p.locator("#processes tbody tr").nth(1).get_attribute("data-identity")
    quiet_button = p.locator(f'#processes tr[data-identity="{identity}"] button', has_text="Quiet")
    quiet_button.focus()  # (focusing scrolls the box to the button: the position is set after)
    p.evaluate(f"{scroller}.scrollLeft = 150")
    seen = int(p.get_attribute("body", "data-refreshed") or 0)
    wait_until(
        lambda: int(p.get_attribute("body", "data-refreshed") or 0) >= seen + 2,
        timeout=15,
        message="two live refreshes",
    )
    assert p.evaluate(f"{scroller}.scrollLeft") == 150
    focused = p.evaluate(
        """() => { const el = document.activeElement;
                   return [el.textContent, el.closest('tr') && el.closest('tr').dataset.identity]; }"""
    )
    assert focused == ["Quiet", identity]
    # Redrawn, not left alone: the region shows the fresh beat.
    assert p.locator("#process-list").get_attribute("data-live") is not None
    assert not page.problems()


def test_stop_asks_first_naming_the_process_then_stops_it(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    """Last in the module: the stopped child is replaced by the swarm under a new identity."""
    identities = swarm_identities(swarm)
    target = sorted(identities)[0]
    p = page.page
    p.goto("/busy")
    p.locator(f'#processes tr[data-identity="{target}"] button', has_text="Stop").click()
    question = p.inner_text(".confirm .question")
    assert question.startswith(f"Stop 1 process: {target} (") and "running" in question, question
    assert rc.exists(keys.signals(target)) == 0
    screenshots(page, "confirm-stop")
    p.get_by_role("button", name="Yes, do it").click()
    assert f"Told 1 process ({target}," in p.inner_text("#flashes")
    wait_until(
        lambda: target not in {pr.identity for pr in process_ops.processes(rc)},
        timeout=30,
        message="the stopped process gone",
    )
    others = identities - {target}
    assert others <= {pr.identity for pr in process_ops.processes(rc)}
