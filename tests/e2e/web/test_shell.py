"""What every page shares, in Chromium against `cogworker web` and a real swarm: the summary bar's
figures agree with the swarm's state (and follow it through Live refresh), the header search (a jid
to its job page, text to its matches in a queue, a retry and a dead entry, a budget that runs out
and "continue"), relative times with the exact time on hover and the UTC/local switch, tables as
labelled cards at 375 px (scrolling inside their box without JavaScript), times that keep reading
true on a page left open, and neutral controls
whose edges have 3:1 contrast in light and dark mode.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import demo_jobs
import pytest
import redis
from playwright.sync_api import Browser, Page

from cogworker import codec
from cogworker.ops import processes as process_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.browser import PHONE, Watched, screenshots, watched_page
from tests.support.redis_server import wait_until
from tests.support.set_entries import dead_job
from tests.support.swarm import Swarm
from tests.support.web_server import WebServer

pytestmark = pytest.mark.slow

PARKED = "shell-parked"  # a queue no process of the swarm reads: what waits there stays
ISO = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (UTC|UTC[+-]\d\d:\d\d)$")


def bar(page: Page) -> dict[str, str]:
    found: dict[str, str] = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#summary [data-figure]')]
             .map(a => [a.dataset.figure, a.querySelector('b').textContent]))"""
    )
    return found


def expected(r: redis.Redis) -> dict[str, str]:
    """The bar's figures as the swarm's own records say them now."""
    live = process_ops.processes(r)
    busy, slots = sum(p.busy for p in live), sum(p.slots for p in live)
    enqueued = sum(int(r.llen(keys.queue(str(q)))) for q in r.smembers(keys.QUEUES))
    return {
        "processes": str(len(live)),
        "slots": f"{busy} / {slots}",
        "utilization": f"{round(100 * busy / slots)} %" if slots else "\N{EN DASH}",
        "enqueued": f"{enqueued:,}",
        "retries": f"{r.zcard(keys.RETRY):,}",
        "dead": f"{r.zcard(keys.DEAD):,}",
    }


@pytest.fixture
def parked(rc: redis.Redis) -> Iterator[None]:
    yield
    rc.delete(keys.queue(PARKED))
    rc.srem(keys.QUEUES, PARKED)


def test_the_summary_bar_agrees_with_the_swarm_and_follows_it_live(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, parked: None
) -> None:
    for n in range(3):
        demo_jobs.record.set(queue=PARKED).perform_async(f"parked-{n}")
    for n in range(2):
        demo_jobs.sleepy.perform_async(f"bar-{n}", 8)
    wait_until(lambda: sum(p.busy for p in process_ops.processes(rc)) == 2, timeout=15, message="2 busy")
    p = page.page
    p.goto("/queues")
    # The figures hold still while both jobs sleep; a beat landing between the page and the check
    # is given another look.
    wait_until(
        lambda: bar(p) == expected(rc) or (p.reload() and False),
        timeout=10,
        message="the bar to agree with the swarm's records",
    )
    assert bar(p)["slots"] == "2 / 4" and bar(p)["utilization"] == "50 %"
    for figure, path in (("processes", "/busy"), ("enqueued", "/queues"), ("dead", "/dead")):
        assert p.get_attribute(f'#summary [data-figure="{figure}"]', "href") == path
    screenshots(page, "summary-bar")

    p.evaluate("localStorage.setItem('cogworker.liveInterval', '2')")
    p.reload()
    p.click("#live-toggle")
    demo_jobs.record.set(queue=PARKED).perform_async("parked-late")
    wait_until(
        lambda: bar(p)["enqueued"] == expected(rc)["enqueued"] == "4",
        timeout=15,
        message="the bar's enqueued figure to follow through Live refresh",
    )
    p.click("#summary [data-figure='enqueued']")
    assert p.url.endswith("/queues")
    assert not page.problems()


def test_search_goes_to_a_jid_and_finds_arguments_in_a_queue_retry_and_dead_entry(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, parked: None
) -> None:
    queued = demo_jobs.record.set(queue=PARKED).perform_async("customer-5521 parked")
    failing = demo_jobs.boom.perform_async("customer-5521 feed down")  # retried by the swarm
    wait_until(lambda: rc.zcard(keys.RETRY) >= 1, timeout=15, message="the failing job in the retry set")
    dead = dead_job("e2edead00000000000000001", args=["customer-5521", {"plan": "gold"}])
    rc.zadd(keys.DEAD, {codec.dumps(dead): time.time() - 300})
    p = page.page
    p.goto("/periodic")
    p.fill("#header-search", str(queued))
    p.press("#header-search", "Enter")
    p.wait_for_url(f"**/jobs/{queued}")
    assert PARKED in p.inner_text("#where")

    p.fill("#header-search", "customer-5521")
    p.press("#header-search", "Enter")
    p.wait_for_url("**/search?q=customer-5521")
    rows = p.locator("#search-matches tbody tr")
    found = {
        (rows.nth(i).get_attribute("data-place"), rows.nth(i).get_attribute("data-jid"))
        for i in range(rows.count())
    }
    assert found == {(f"queue:{PARKED}", str(queued)), ("retry", str(failing)), ("dead", dead["jid"])}
    assert "3 matches" in p.inner_text("#search-headline")
    assert p.input_value("#header-search") == "customer-5521"
    screenshots(page, "search")
    p.locator('#search-matches tr[data-place="dead"] a').first.click()
    assert "/dead/" in p.url and "customer-5521" in p.inner_text("main")

    p.fill("#header-search", "nobody-has-this-text")
    p.press("#header-search", "Enter")
    assert "No job's arguments or class holds" in p.inner_text("#search-headline")
    assert p.locator("#search-continue").count() == 0
    rc.zrem(keys.DEAD, codec.dumps(dead))


def test_times_are_relative_with_the_exact_time_on_hover_and_a_utc_local_switch(
    browser: Browser, ui: WebServer, swarm: Swarm, rc: redis.Redis
) -> None:
    with watched_page(browser, ui.url, timezone_id="Asia/Tokyo") as watched:
        p = watched.page
        p.goto("/busy")
        started = p.locator("#processes time > span").first
        # "now" when the swarm started within the second (this test alone).
        assert re.fullmatch(r"now|\d+ (s|min|h)( \d+ min)? ago", started.inner_text()), started.inner_text()
        utc_title = started.get_attribute("title") or ""
        assert ISO.match(utc_title) and utc_title.endswith(" UTC")
        assert p.inner_text("#time-zone") == "UTC" and "Times are in UTC" in p.inner_text("#time-note")

        p.click("#time-zone")
        local_title = started.get_attribute("title") or ""
        assert local_title.endswith(" UTC+09:00") and ISO.match(local_title)
        assert p.get_attribute("#time-zone", "aria-pressed") == "true"
        assert "Asia/Tokyo" in p.inner_text("#time-note") and "UTC+09:00" in p.inner_text("#time-note")
        utc = time.strptime(utc_title[:19], "%Y-%m-%d %H:%M:%S")
        local = time.strptime(local_title[:19], "%Y-%m-%d %H:%M:%S")
        assert time.mktime(local) - time.mktime(utc) == 9 * 3600
        p.reload()  # the choice is kept
        assert p.get_attribute("body", "data-time-zone") == "local"
        assert (p.locator("#processes time > span").first.get_attribute("title") or "").endswith("+09:00")
        screenshots(watched, "times-local")
        p.click("#time-zone")
        assert (p.locator("#processes time > span").first.get_attribute("title") or "").endswith(" UTC")
        assert not watched.problems()

    with watched_page(browser, ui.url, java_script_enabled=False) as plain:
        plain.page.goto("/busy")
        assert not plain.page.is_visible("#time-zone")
        assert "Times are UTC" in plain.page.inner_text("footer")
        assert re.search(r"ago$|^now$", plain.page.locator("#processes time > span").first.inner_text())


def test_a_page_left_open_keeps_its_relative_times_true(page: Watched, swarm: Swarm) -> None:
    p = page.page
    p.clock.install()  # the page's own clock, moved on below without waiting
    p.goto("/busy")
    started = p.locator("#processes time > span").first
    p.clock.fast_forward("20:00")
    wait_until(
        lambda: re.fullmatch(r"(2\d) min ago", started.inner_text()) is not None,
        timeout=5,
        message=f"20 minutes on, the start to read 2x min ago (it reads {started.inner_text()!r})",
    )
    assert not page.problems()


def test_wide_tables_become_labelled_cards_at_375_px_and_scroll_in_their_box_without_script(
    browser: Browser, ui: WebServer, swarm: Swarm, rc: redis.Redis
) -> None:
    with watched_page(browser, ui.url) as watched:
        p = watched.page
        p.set_viewport_size(PHONE)
        p.goto("/busy")
        row = p.locator("#processes tbody tr").first
        assert (
            p.evaluate("getComputedStyle(document.querySelector('#processes tbody tr')).display") == "block"
        )
        host = row.locator("td").nth(1)
        assert host.get_attribute("data-label") == "Host"
        label = p.evaluate(
            "getComputedStyle(document.querySelectorAll('#processes tbody tr td')[1], '::before').content"
        )
        assert label == '"Host"'
        box = row.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
        assert p.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1
        screenshots(watched, "busy-cards")
        dead = dead_job("e2ecards000000000000001", args=["a-long-argument-" * 12])
        rc.zadd(keys.DEAD, {codec.dumps(dead): time.time()})
        try:
            p.set_viewport_size(PHONE)  # screenshots() leaves the desktop size
            p.goto("/dead")
            assert p.is_visible("input[data-select-all]")  # the headings are gone, select-all stays
            assert p.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1  # it wraps
        finally:
            rc.zrem(keys.DEAD, codec.dumps(dead))

    with watched_page(browser, ui.url, java_script_enabled=False) as plain:
        p = plain.page
        p.set_viewport_size(PHONE)
        p.goto("/busy")
        scroller = "document.querySelector('#process-list .table-scroll')"
        assert p.evaluate(f"{scroller}.scrollWidth > {scroller}.clientWidth")  # scrolls in its box
        assert p.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1


CONTRAST = """() => {
  function rgb(text) { return text.match(/[\\d.]+/g).map(Number); }
  function lum(c) {
    const [r, g, b] = c.slice(0, 3).map(v => v / 255)
      .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function behind(el) {
    for (let at = el.parentElement; at; at = at.parentElement) {
      const c = rgb(getComputedStyle(at).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c;
    }
    return rgb(getComputedStyle(document.documentElement).backgroundColor);
  }
  const picked = 'button.btn:not(.primary):not(.danger), input[type=search], input[type=text], select, ' +
    '#live-toggle, input[type=checkbox]';
  return [...document.querySelectorAll(picked)].filter(el => el.getClientRects().length).map(el => {
    const edge = lum(rgb(getComputedStyle(el).borderTopColor)), back = lum(behind(el));
    const ratio = (Math.max(edge, back) + 0.05) / (Math.min(edge, back) + 0.05);
    return [el.type || el.tagName, el.id || el.name || el.textContent.trim(), Math.round(ratio * 100) / 100];
  });
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_neutral_controls_edges_have_3_to_1_contrast(
    page: Watched, swarm: Swarm, rc: redis.Redis, scheme: str
) -> None:
    dead = dead_job("e2econtrast0000000000001")
    rc.zadd(keys.DEAD, {codec.dumps(dead): time.time()})  # the dead list's checkboxes
    p = page.page
    p.emulate_media(color_scheme=scheme)
    kinds: set[str] = set()
    for path in ("/", "/busy", "/queues", "/dead", "/search?q=x"):
        p.goto(path)
        ratios = p.evaluate(CONTRAST)
        low = [(kind, name, ratio) for kind, name, ratio in ratios if ratio < 3]
        assert not low, f"{scheme} {path}: {low}"
        kinds |= {str(kind) for kind, _, _ in ratios}
    # Buttons (the Live toggle, Search, row buttons), the search field, the interval, checkboxes.
    assert {"button", "submit", "search", "select-one", "checkbox"} <= kinds, kinds
    screenshots(page, f"controls-{scheme}")
    rc.zrem(keys.DEAD, codec.dumps(dead))


def test_a_search_that_runs_out_of_time_says_so_and_continues(
    page: Watched, rc: redis.Redis, web_settings: Settings
) -> None:
    """Last in the module: it fills the dead set with more than a request's budget can read."""
    now = time.time()
    pipe = rc.pipeline(transaction=False)
    for n in range(200_000):
        job = {"class": "demo_jobs.boom", "args": [f"hay-{n}"], "jid": f"hay{n:021d}", "queue": "default"}
        pipe.zadd(keys.DEAD, {codec.dumps(job): now - n})
        if n % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    try:
        p = page.page
        p.goto("/search?q=needle-nowhere")
        assert "ran out before every place was read" in p.inner_text("#search-budget")
        assert "No match yet" in p.inner_text("#search-headline")
        screenshots(page, "search-budget")
        p.click("#search-continue")
        assert "place=dead" in p.url and int(p.url.split("at=")[1].split("&")[0]) > 0
        read = int(re.sub(r"\D", "", p.inner_text("#search-headline").split(";")[1]))
        assert read > 0 and "No match yet" in p.inner_text("#search-headline")
    finally:
        rc.delete(keys.DEAD)
