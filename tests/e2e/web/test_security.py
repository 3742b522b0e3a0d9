"""Job data can't run as script in the UI, and another site can't make the UI act.

Stored XSS through job data is what rq-dashboard #526 and Sidekiq CVE-2024-32887 were: here a dead
job whose class, args, queue, error and backtrace are markup, and a real queue named with markup,
are shown on every page that shows them, as text; the flag the markup would set stays unset, no
element it would create exists, and no CSP violation happened (the escaping held; the CSP, which
would also have blocked it, never had to). The filter fields echo a reflected payload as text too.

A POST from another origin, whether a page on another site auto-submitting a form or a request
naming another Origin, gets 403 and changes nothing.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote, urlencode

import pytest
import redis

from cogworker import codec
from cogworker.ops import sets as set_ops
from cogworker.store import keys
from tests.support.browser import Watched
from tests.support.redis_server import free_port, wait_until
from tests.support.set_entries import dead_job
from tests.support.web_server import WebServer

pytestmark = pytest.mark.slow

SCRIPT = "<script>window.__xss=1</script>"
IMG = '"><img src=x onerror="window.__xss=1">'
SVG = '"><svg/onload=window.__xss=1>'  # no whitespace: a valid queue name
DEAD_JID = "e0000000000000000000xss1"
QUEUED_JID = "e0000000000000000000xss2"
DIED_AT = 1_700_000_000.5


@pytest.fixture
def hostile(rc: redis.Redis) -> Iterator[str]:
    """A dead job and a queued one made of markup; yields the dead entry's key."""
    dead = dead_job(
        DEAD_JID,
        **{
            "class": SCRIPT,
            "args": [IMG, SCRIPT],
            "queue": SVG,
            "error_class": SCRIPT,
            "error_message": IMG,
            "backtrace": [SCRIPT, IMG],
        },
    )
    rc.zadd(keys.DEAD, {codec.dumps(dead): DIED_AT})
    queued = {
        "class": IMG,
        "args": [SCRIPT],
        "kwargs": {},
        "jid": QUEUED_JID,
        "queue": SCRIPT,
        "created_at": time.time() - 3600,
        "enqueued_at": time.time() - 3600,  # the longest wait: the dashboard names this queue
    }
    rc.sadd(keys.QUEUES, SCRIPT)
    rc.lpush(keys.queue(SCRIPT), codec.dumps(queued))
    yield set_ops.entry_key(DIED_AT, DEAD_JID)
    rc.delete(keys.DEAD, keys.queue(SCRIPT), keys.QUEUES)


def assert_inert(watched: Watched, path: str, *texts: str) -> None:
    """`path` answers 200, shows each of `texts` as text, and no markup from the data ran or exists."""
    page = watched.page
    response = page.goto(path)
    assert response is not None and response.status == 200, f"{path}: {response and response.status}"
    shown = page.inner_text("body")
    for text in texts:
        assert text in shown, f"{path} doesn't show {text!r} as text:\n{shown[:3000]}"
    assert page.evaluate("typeof window.__xss") == "undefined", f"{path}: the payload ran"
    assert page.locator("img[src='x'], svg[onload], [onerror]").count() == 0, f"{path}: injected elements"
    sources = page.evaluate("Array.from(document.scripts, s => s.getAttribute('src'))")
    ours = ("/static/app.js", "/static/charts.js")  # every script is one of the UI's own files
    assert all(src and src.endswith(ours) for src in sources), f"{path}: scripts {sources}"
    assert not watched.problems(), f"{path}: {watched.problems()}"


def test_markup_in_job_data_renders_as_text_on_every_page(page: Watched, hostile: str) -> None:
    assert_inert(page, "/", SCRIPT)  # the queue with the longest wait, by name
    assert_inert(page, "/dead", SCRIPT, "<img src=x onerror=")
    assert_inert(page, f"/dead/{quote(hostile, safe='')}", SCRIPT, IMG, SVG)
    assert_inert(page, f"/jobs/{DEAD_JID}", DEAD_JID, SCRIPT, "<img src=x onerror=")
    assert_inert(page, "/queues", SCRIPT)
    # The queue page shows a jid's first 8 characters (the whole in the abbr's title and the link).
    assert_inert(page, f"/queues/{quote(SCRIPT, safe='')}", QUEUED_JID[:8], "<img src=x onerror=")
    assert page.page.locator(f"abbr[title='{QUEUED_JID}']").count() == 1
    # Reflected: the filter fields echo what was asked for.
    assert_inert(page, "/dead?" + urlencode({"job": SCRIPT, "error": IMG, "args": SVG}))
    for name, value in (("job", SCRIPT), ("error", IMG), ("args", SVG)):
        assert page.page.input_value(f"form.filters input[name={name}]") == value


def test_the_entry_page_link_from_the_list_is_the_entry_key(page: Watched, hostile: str) -> None:
    page.page.goto("/dead")
    page.page.locator(f'#entries tr[data-jid="{DEAD_JID}"] a').first.click()
    assert page.page.url.endswith(f"/dead/{quote(hostile, safe='')}")
    assert SCRIPT in page.page.inner_text("#backtrace")
    assert page.page.evaluate("typeof window.__xss") == "undefined"


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Serves one page that posts a form to the UI as soon as it loads."""

    form = ""

    def do_GET(self) -> None:
        body = self.form.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def attacker() -> Iterator[tuple[str, type[_Attacker]]]:
    """Another origin (localhost on another port: a different site from 127.0.0.1)."""
    handler = type("Attacker", (_Attacker,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_cross_origin_post_is_refused_and_changes_nothing(
    page: Watched, ui: WebServer, rc: redis.Redis, attacker: tuple[str, type[_Attacker]]
) -> None:
    rc.sadd(keys.QUEUES, "victim")
    p = page.page
    p.goto("/queues")
    form = p.locator('#queues tr[data-queue="victim"] form').filter(has_text="Pause")
    action = form.get_attribute("action")
    fields = form.evaluate("f => Array.from(new FormData(f).entries())")
    assert action and not rc.sismember(keys.PAUSED, "victim")
    target = page.page.url.split("/queues")[0] + action

    # A page on another site that submits the same form as soon as it loads.
    origin, handler = attacker
    inputs = "".join(f'<input type="hidden" name="{n}" value="{v}">' for n, v in fields)
    handler.form = (
        f'<form method="post" action="{target}">{inputs}</form><script>document.forms[0].submit()</script>'
    )
    with p.expect_response(lambda r: r.url == target and r.request.method == "POST") as posted:
        p.goto(origin + "/")
    assert posted.value.status == 403
    assert "same-origin" in p.inner_text("body")
    assert not rc.sismember(keys.PAUSED, "victim")
    wait_until(lambda: ui.tail().count("web_post_refused") == 1, timeout=5, message="the refusal logged")

    # A request naming another site's Origin (no Sec-Fetch-Site: not a browser that sends it).
    refused = p.request.post(target, form=dict(fields), headers={"Origin": "https://evil.example"})
    assert refused.status == 403
    assert not rc.sismember(keys.PAUSED, "victim")
    wait_until(lambda: ui.tail().count("web_post_refused") == 2, timeout=5, message="the refusal logged")

    # The same form from the UI's own page works: the refusals were about the origin alone.
    p.goto("/queues")
    p.locator('#queues tr[data-queue="victim"]').get_by_role("button", name="Pause", exact=True).click()
    # The click returns before the redirected page has loaded: wait for its flash, then count.
    p.locator(".flash-ok").first.wait_for(timeout=10_000)
    assert p.locator(".flash-ok").count() == 1
    assert rc.sismember(keys.PAUSED, "victim")
    rc.srem(keys.PAUSED, "victim")
