"""The UI's guards: security headers, the same-origin rule, HTTP Basic, the optional session, read-only
mode, safe redirects, and a Redis that is down. In-process through Starlette's TestClient against the
session's real Redis."""

from __future__ import annotations

import base64
import re

import pytest
import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.web import create_app
from cogworker.web.actions import action
from cogworker.web.security import CONTENT_SECURITY_POLICY, credentials_match
from cogworker.web.session import COOKIE
from tests.support.redis_server import RedisServer, free_port
from tests.support.web_requests import SAME_ORIGIN


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/", "/static/app.js", "/static/app.css", "/no-such-page"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'self'" in CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY


def test_pages_hold_no_inline_script_or_style(client: TestClient) -> None:
    html = client.get("/").text
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert " style=" not in html
    assert " onclick=" not in html


def test_unknown_page_is_a_404_page(client: TestClient) -> None:
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert "No such page." in response.text


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({"Sec-Fetch-Site": "same-origin"}, True),
        ({"Sec-Fetch-Site": "cross-site"}, False),
        ({"Sec-Fetch-Site": "same-site"}, False),
        ({"Sec-Fetch-Site": "none"}, False),
        # A browser that sends no Sec-Fetch-Site: its Origin decides.
        ({"Origin": "http://testserver"}, True),
        ({"Origin": "http://evil.example"}, False),
        ({"Origin": "null"}, False),
        # Sec-Fetch-Site wins over an Origin that looks right.
        ({"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"}, False),
        ({}, False),
    ],
)
def test_a_post_is_refused_unless_same_origin(
    settings: Settings, r: redis.Redis, headers: dict[str, str], allowed: bool
) -> None:
    done: list[str] = []

    @action("/")
    def mark(request: Request, state: object, form: object) -> str:
        done.append("yes")
        return "marked"

    app = create_app(settings)
    app.router.routes.append(Route("/mark", mark, methods=["POST"]))
    response = TestClient(app, follow_redirects=False).post("/mark", headers=headers)
    assert (response.status_code == 303) is allowed
    assert (response.status_code == 403) is not allowed
    assert bool(done) is allowed


def test_a_refused_post_is_logged(client: TestClient) -> None:
    with capture_logs() as logs:
        response = client.post("/", headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert "not a same-origin request" in response.text
    refused = [e for e in logs if e["event"] == "web_post_refused"]
    assert len(refused) == 1
    assert "evil.example" in refused[0]["reason"]
    assert refused[0]["path"] == "/"


def test_behind_a_proxy_the_forwarded_origin_is_trusted_only_when_configured(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    proxied = {
        "Origin": "https://jobs.example.com",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "jobs.example.com",
    }
    trusting = load_settings(redis_url=redis_server.url, web_trust_forwarded=True)
    plain = load_settings(redis_url=redis_server.url)
    # The dashboard takes no POST: 405 means the guard let it through to the router.
    assert TestClient(create_app(trusting)).post("/", headers=proxied).status_code == 405
    assert TestClient(create_app(plain)).post("/", headers=proxied).status_code == 403
    # Trusting the proxy is not trusting any origin.
    forged = {**proxied, "Origin": "https://evil.example"}
    assert TestClient(create_app(trusting)).post("/", headers=forged).status_code == 403


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_http_basic_guards_every_page_when_credentials_are_set(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    settings = load_settings(redis_url=redis_server.url, web_username="ops", web_password="s3cret:x")
    client = TestClient(create_app(settings))
    for path in ("/", "/static/app.css"):
        refused = client.get(path)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic ")
    assert client.get("/", headers=_basic("ops", "wrong")).status_code == 401
    assert client.get("/", headers=_basic("other", "s3cret:x")).status_code == 401
    assert client.get("/", headers=_basic("ops", "s3cret:x")).status_code == 200


def test_credentials_match_refuses_malformed_headers() -> None:
    assert credentials_match("Basic " + base64.b64encode(b"a:b").decode(), "a", "b")
    assert not credentials_match(None, "a", "b")
    assert not credentials_match("Bearer x", "a", "b")
    assert not credentials_match("Basic !!!not-base64", "a", "b")
    assert not credentials_match("Basic " + base64.b64encode(b"\xff\xfe").decode(), "a", "b")


def test_half_the_credentials_is_a_config_error(redis_server: RedisServer) -> None:
    from cogworker.settings import ConfigError

    with pytest.raises(ConfigError, match="COGWORKER_WEB_USERNAME and COGWORKER_WEB_PASSWORD"):
        load_settings(redis_url=redis_server.url, web_username="ops")


def _flash_route(app: Starlette) -> None:
    @action("/")
    def note(request: Request, state: object, form: object) -> str:
        return "noted"

    app.router.routes.append(Route("/note", note, methods=["POST"]))


def test_standalone_the_ui_keeps_its_own_session_for_flash_messages(settings: Settings) -> None:
    app = create_app(settings)
    _flash_route(app)
    client = TestClient(app, follow_redirects=False)
    response = client.post("/note", headers=SAME_ORIGIN)
    assert response.status_code == 303
    assert COOKIE in response.cookies
    page = client.get(response.headers["location"])
    assert "noted" in page.text
    assert "noted" not in client.get("/").text  # shown once


def test_mounted_in_a_host_with_a_session_the_ui_uses_the_hosts(settings: Settings) -> None:
    """The seed's OptionalSession: no second cookie, and the host's auth middleware sees its real
    session inside the UI."""
    ui = create_app(settings)
    _flash_route(ui)

    async def login(request: Request) -> PlainTextResponse:
        request.session["user"] = "ada"
        return PlainTextResponse("in")

    async def whoami(request: Request) -> PlainTextResponse:
        return PlainTextResponse(str(request.session.get("user")) + " " + str(request.session))

    host = Starlette(
        routes=[Route("/login", login), Route("/whoami", whoami), Mount("/jobs", app=ui)],
        middleware=[Middleware(SessionMiddleware, secret_key="host-secret", session_cookie="host_session")],
    )
    client = TestClient(host, follow_redirects=False)
    client.get("/login")
    response = client.post("/jobs/note", headers=SAME_ORIGIN, data={"back": "/jobs/"})
    assert response.status_code == 303
    assert response.headers["location"] == "/jobs/"
    assert COOKIE not in response.cookies
    assert "host_session" in response.cookies
    # The flash went into the host's session, beside the host's own user.
    assert "cogworker_flash" in client.get("/whoami").text
    assert "ada" in client.get("/whoami").text
    page = client.get("/jobs/")
    assert "noted" in page.text
    assert COOKIE not in page.cookies
    assert 'href="/jobs/static/app.css"' in page.text
    assert client.get("/jobs/static/app.css").status_code == 200


def test_an_action_never_redirects_off_the_ui(settings: Settings) -> None:
    app = create_app(settings)
    _flash_route(app)
    client = TestClient(app, follow_redirects=False)
    for back in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "/ok\r\nSet-Cookie: x=1"):
        response = client.post("/note", headers=SAME_ORIGIN, data={"back": back})
        assert response.headers["location"] == "/", back
    assert client.post("/note", headers=SAME_ORIGIN, data={"back": "/dead?page=2"}).headers["location"] == (
        "/dead?page=2"
    )


def test_read_only_refuses_actions_by_setting_and_by_the_hosts_rule(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    done: list[str] = []

    def mark_app(settings: Settings, **kwargs: object) -> TestClient:
        @action("/")
        def mark(request: Request, state: object, form: object) -> str:
            done.append("x")
            return "marked"

        app = create_app(settings, **kwargs)  # type: ignore[arg-type]
        app.router.routes.append(Route("/mark", mark, methods=["POST"]))
        return TestClient(app, follow_redirects=False)

    by_setting = mark_app(load_settings(redis_url=redis_server.url, web_read_only=True))
    assert by_setting.post("/mark", headers=SAME_ORIGIN).status_code == 403
    assert "Read-only" in by_setting.get("/").text

    rule = mark_app(
        load_settings(redis_url=redis_server.url),
        read_only=lambda request: request.headers.get("x-role") != "admin",
    )
    assert rule.post("/mark", headers=SAME_ORIGIN).status_code == 403
    assert rule.post("/mark", headers={**SAME_ORIGIN, "X-Role": "admin"}).status_code == 303
    assert done == ["x"]


def test_the_dashboard_shows_the_counters_and_clamps_the_history(settings: Settings, r: redis.Redis) -> None:
    r.set(keys.STAT_PROCESSED, 1234567)
    r.set(keys.STAT_FAILED, "not a number")  # shown as nothing, not a failing page
    client = TestClient(create_app(settings))
    html = client.get("/").text
    assert 'data-processed="1234567"' in html
    assert "1,234,567" in html
    for asked, shown in (("3", 7), ("99999", 180), ("junk", 30), ("90", 90)):
        page = client.get("/", params={"days": asked}).text
        assert page.count('<tr><th scope="row">') == shown, asked  # the history chart's table: a row a day


def test_redis_down_gives_a_page_that_says_so(r: redis.Redis) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings = load_settings(redis_url=url, redis_timeout_s=1.0)
    response = TestClient(create_app(settings)).get("/")
    assert response.status_code == 503
    assert "Can&#39;t reach Redis" in response.text or "Can't reach Redis" in response.text
