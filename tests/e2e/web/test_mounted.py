"""The UI mounted under /ops inside a host Starlette app (tests/apps/web_host.py) with its own
session and an auth middleware reading `request.session["user"]`.

Every nav link, form and asset works under the prefix, an action's redirect stays under it, the UI's
flash lives in the host's session cookie (no `cogworker_session` ever appears, and the host's login
survives the UI writing to the session), and without the host's login the host blocks the UI.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from playwright.sync_api import Browser, Response

from cogworker.store import keys
from tests.support.browser import Watched, watched_page
from tests.support.redis_server import RedisServer
from tests.support.web_server import WebServer, asgi_app

pytestmark = pytest.mark.slow

PREFIX = "/ops"
HOST_COOKIE = "host_session"


@pytest.fixture(scope="module")
def host(web_redis: RedisServer) -> Iterator[WebServer]:
    with asgi_app("web_host:create", web_redis.url) as server:
        yield server


@pytest.fixture
def host_page(browser: Browser, host: WebServer) -> Iterator[tuple[Watched, list[Response]]]:
    """A page on the host app and every response it got."""
    with watched_page(browser, host.url) as watched:
        seen: list[Response] = []
        watched.page.on("response", lambda response: seen.append(response))
        yield watched, seen


def path_of(url: str) -> str:
    return urlsplit(url).path


def local_targets(watched: Watched) -> list[str]:
    """Every link, form action and asset URL on the page that points into this site."""
    found: list[str] = watched.page.evaluate(
        """() => [
          ...Array.from(document.querySelectorAll('a[href]'), a => a.getAttribute('href')),
          ...Array.from(document.querySelectorAll('form[action]'), f => f.getAttribute('action')),
          ...Array.from(document.querySelectorAll('[formaction]'), b => b.getAttribute('formaction')),
          ...Array.from(document.querySelectorAll('link[href], script[src]'),
                        e => e.getAttribute('href') || e.getAttribute('src')),
        ]"""
    )
    return [t for t in found if not t.startswith(("http:", "https:", "#", "mailto:", "data:"))]


def test_without_the_host_login_the_host_blocks_the_ui(host_page: tuple[Watched, list[Response]]) -> None:
    watched, _ = host_page
    p = watched.page
    for path in (f"{PREFIX}/", f"{PREFIX}/queues", f"{PREFIX}/static/app.css"):
        response = p.goto(path)
        assert response is not None and response.status == 401, path
        assert "log in first" in p.inner_text("body")
    refused = p.request.post(f"{PREFIX}/queues/default/pause", form={"queue": "default"})
    assert refused.status == 401


def test_every_link_form_and_asset_works_under_the_prefix_with_the_hosts_session(
    host_page: tuple[Watched, list[Response]], rc: redis.Redis
) -> None:
    watched, seen = host_page
    p = watched.page
    rc.sadd(keys.QUEUES, "hosted")
    p.goto("/login?user=alice")
    assert path_of(p.url) == f"{PREFIX}/"
    assert p.locator("#totals").count() == 1

    nav = p.eval_on_selector_all("header nav a", "links => links.map(a => a.getAttribute('href'))")
    assert len(nav) >= 7 and all(href.startswith(f"{PREFIX}/") or href == PREFIX for href in nav), nav
    for href in nav:
        p.locator(f'header nav a[href="{href}"]').click()
        p.wait_for_url(lambda url, h=href: path_of(url) == path_of(h))
        assert p.locator("main h1").count() == 1, href
        outside = [t for t in local_targets(watched) if not t.startswith(f"{PREFIX}/")]
        assert not outside, f"{href}: links/forms/assets outside {PREFIX}: {outside}"

    assets = [r for r in seen if "/static/" in r.url]
    assert {path_of(r.url) for r in assets} >= {f"{PREFIX}/static/app.css", f"{PREFIX}/static/app.js"}
    assert all(r.status in (200, 304) for r in assets), [(r.url, r.status) for r in assets]
    failed = [(r.url, r.status) for r in seen if r.status >= 400 and not r.url.endswith("/favicon.ico")]
    assert not failed, failed

    # An action: its redirect stays under the prefix and its flash is in the host's session.
    p.goto(f"{PREFIX}/queues")
    row = p.locator('#queues tr[data-queue="hosted"]')
    row.get_by_role("button", name="Pause", exact=True).click()
    p.wait_for_selector(".flash-ok")
    assert path_of(p.url) == f"{PREFIX}/queues"
    assert rc.sismember(keys.PAUSED, "hosted")
    redirects = [r for r in seen if r.request.method == "POST"]
    assert redirects and all(r.status == 303 for r in redirects)
    assert all(path_of(r.header_value("location") or "").startswith(f"{PREFIX}/") for r in redirects)

    set_cookies = [c for r in seen for c in r.header_values("set-cookie")]
    assert set_cookies and all(c.startswith(f"{HOST_COOKIE}=") for c in set_cookies), set_cookies
    assert {c["name"] for c in p.context.cookies()} == {HOST_COOKIE}
    # The host's login survived the UI writing its flash into the same session.
    assert p.goto("/whoami") is not None and p.inner_text("body") == "alice"
    assert not watched.problems()
    rc.srem(keys.PAUSED, "hosted")
