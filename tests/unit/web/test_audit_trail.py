"""The audit trail in-process against a real Redis: every action recorded (and logged as `web_action`)
with its user, from HTTP Basic, a host app's authenticated `request.user`, the `user_of` hook, or
"anonymous"; errors recorded as such; read-only refusals logged, not recorded; the "Recent actions"
page; and the record's write losing its reply or never running behind the RESP proxy, which leaves
the action's answer (303 and its message) untouched."""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Mount
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from cogworker.ops import audit as audit_ops
from cogworker.settings import Settings, load_settings
from cogworker.web import create_app
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy
from tests.support.web_requests import SAME_ORIGIN, SCRIPT


def records(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange("cogworker:audit", 0, -1)]


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def resume(client: TestClient, name: str = "hourly", prefix: str = "") -> int:
    response = client.post(f"{prefix}/periodic/resume", data={"name": name}, headers=SAME_ORIGIN)
    return response.status_code


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_an_action_is_recorded_with_the_basic_user_and_listed_newest_first(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    settings = load_settings(redis_url=redis_server.url, web_username="ops", web_password="s3cret")
    client = TestClient(create_app(settings), follow_redirects=False, headers=basic("ops", "s3cret"))
    with capture_logs() as logs:
        assert resume(client) == 303
        failed = client.post("/periodic/pause", data={"name": "nope", "confirm": "yes"}, headers=SAME_ORIGIN)
    assert failed.status_code == 303
    newest, oldest = records(r)
    assert oldest["user"] == "ops" and oldest["path"] == "/periodic/resume"
    assert (oldest["outcome"], oldest["did"]) == ("ok", "hourly: was not paused")
    assert oldest["remote"] == "testclient" and oldest["at"] > 0
    assert (newest["outcome"], newest["user"]) == ("error", "ops")
    assert newest["did"] == "no periodic entry 'nope' (see `cogworker periodic list`)"
    logged = [e for e in logs if e["event"] == "web_action"]
    assert [(e["user"], e["outcome"]) for e in logged] == [("ops", "ok"), ("ops", "error")]

    page = client.get("/actions").text
    rows = re.findall(r'<tr data-outcome="(\w+)">.*?<td class="user">([^<]*)</td>', page, re.DOTALL)
    assert rows == [("error", "ops"), ("ok", "ops")]
    assert "hourly: was not paused" in page and "ago" in page
    assert "<form" not in page.split('id="action-list"')[1]  # read-only data: no action on it


def test_without_any_login_the_user_is_anonymous_and_stored_text_is_escaped(
    client: TestClient, r: redis.Redis
) -> None:
    assert "No actions recorded yet" in client.get("/actions").text
    assert resume(client, SCRIPT) == 303
    [record] = records(r)
    assert record["user"] == "anonymous"
    page = client.get("/actions").text
    assert SCRIPT not in page and "&lt;script&gt;" in page


class Header(AuthenticationBackend):
    """The host's login: the user named in X-User, else nobody."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        name = conn.headers.get("x-user")
        return (AuthCredentials(["authenticated"]), SimpleUser(name)) if name else None


def host(settings: Settings, **options: Any) -> TestClient:
    app = Starlette(
        routes=[Mount("/ops", app=create_app(settings, **options))],
        middleware=[Middleware(AuthenticationMiddleware, backend=Header())],
    )
    return TestClient(app, follow_redirects=False)


def test_a_mounted_ui_records_the_host_request_user_or_what_user_of_says(
    settings: Settings, r: redis.Redis
) -> None:
    client = host(settings)
    alice = {**SAME_ORIGIN, "X-User": "alice"}
    assert client.post("/ops/periodic/resume", data={"name": "a"}, headers=alice).status_code == 303
    assert resume(client, "b", prefix="/ops") == 303  # the host let in nobody: anonymous
    assert [(rec["user"], rec["path"]) for rec in records(r)] == [
        ("anonymous", "/ops/periodic/resume"),
        ("alice", "/ops/periodic/resume"),
    ]
    r.delete("cogworker:audit")
    hooked = host(settings, user_of=lambda request: request.headers.get("x-staff"))
    headers = {**SAME_ORIGIN, "X-User": "alice"}
    hooked.post("/ops/periodic/resume", data={"name": "a"}, headers={**headers, "X-Staff": "bob@example.com"})
    hooked.post("/ops/periodic/resume", data={"name": "a"}, headers=headers)  # the hook says nothing
    assert [rec["user"] for rec in records(r)] == ["alice", "bob@example.com"]


def test_a_read_only_refusal_is_logged_with_the_user_and_not_recorded(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    settings = load_settings(
        redis_url=redis_server.url, web_read_only=True, web_username="viewer", web_password="pw"
    )
    client = TestClient(create_app(settings), follow_redirects=False, headers=basic("viewer", "pw"))
    with capture_logs() as logs:
        assert resume(client) == 403
    [refused] = [e for e in logs if e["event"] == "web_action_refused"]
    assert refused["user"] == "viewer"
    assert r.exists("cogworker:audit") == 0


def test_the_audit_list_is_capped(settings: Settings, r: redis.Redis) -> None:
    entry = audit_ops.AuditRecord(at=1.0, user="u", path="/p", did="d", outcome="ok", remote=None)
    for _ in range(audit_ops.AUDIT_KEPT + 5):
        audit_ops.record(r, entry)
    assert r.llen("cogworker:audit") == audit_ops.AUDIT_KEPT
    r.lpush("cogworker:audit", "not json")
    found, total = audit_ops.recent(r, 3)
    assert len(found) == 2 and total == audit_ops.AUDIT_KEPT + 1


def test_a_lost_reply_on_the_audit_write_still_answers_the_action(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    """The record ran, its reply never came: the action's 303 and message stand, the record is there
    once (no retry), and the loss is logged."""
    client = TestClient(create_app(load_settings(redis_url=resp_proxy.url)), follow_redirects=False)
    rule = resp_proxy.lose_reply(command="EXEC")
    with capture_logs() as logs:
        response = client.post(
            "/periodic/resume", data={"name": "x", "back": "/periodic"}, headers=SAME_ORIGIN
        )
    assert rule.fired == 1
    assert response.status_code == 303 and response.headers["location"] == "/periodic"
    assert [e["event"] for e in logs if e["event"].startswith("web_action")] == [
        "web_action",
        "web_action_unrecorded",
    ]
    direct = private_redis.client()
    assert [rec["did"] for rec in records(direct)] == ["x: was not paused"]
    assert flashes(client.get("/periodic").text) == [("ok", "x: was not paused")]


def test_an_audit_write_that_never_ran_still_answers_the_action(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    client = TestClient(create_app(load_settings(redis_url=resp_proxy.url)), follow_redirects=False)
    direct = private_redis.client()
    direct.sadd("cogworker:periodic:paused", "x")
    rule = resp_proxy.drop_command(command="LPUSH", arg="cogworker:audit")
    response = client.post("/periodic/resume", data={"name": "x"}, headers=SAME_ORIGIN)
    assert rule.fired == 1 and response.status_code == 303
    assert direct.smembers("cogworker:periodic:paused") == set()  # the action itself happened
    assert direct.exists("cogworker:audit") == 0
    assert flashes(client.get("/periodic").text) == [("ok", "x: resumed; its next slot runs as planned")]


def test_an_action_that_could_not_reach_redis_is_logged_without_a_second_try_to_record_it(
    private_redis: RedisServer,
) -> None:
    client = TestClient(create_app(load_settings(redis_url=private_redis.url)), follow_redirects=False)
    private_redis.stop()
    with capture_logs() as logs:
        assert resume(client) == 303
    events = [e for e in logs if e["event"].startswith("web_action")]
    assert [(e["event"], e["outcome"]) for e in events] == [("web_action", "error")]
    assert "can't reach Redis" in events[0]["did"]
