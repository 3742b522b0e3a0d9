"""A host Starlette app that mounts the Web UI under /ops, as a user's own app would
(tests/e2e/web/test_mounted.py serves it with `uvicorn web_host:create --factory`).

It has its own session (SessionMiddleware, cookie `host_session`) and an auth middleware that lets a
request into /ops only when `request.session["user"]` is set, which only the host's /login does.
The UI must work under the prefix and see this session: no second cookie of its own.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

import cogworker.web
from cogworker.settings import load_settings

PREFIX = "/ops"
COOKIE = "host_session"


class RequireLogin:
    """The host's auth: /ops needs a logged-in user in the host's session."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inside = scope["type"] == "http" and (
            scope["path"] == PREFIX or scope["path"].startswith(PREFIX + "/")
        )
        if inside and not scope["session"].get("user"):
            await PlainTextResponse("host: log in first\n", status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def home(request: Request) -> Response:
    return PlainTextResponse(f"host home; user={request.session.get('user')}\n")


def login(request: Request) -> Response:
    request.session["user"] = request.query_params.get("user", "operator")
    return RedirectResponse(PREFIX + "/", status_code=303)


def whoami(request: Request) -> Response:
    return PlainTextResponse(str(request.session.get("user")))


def create() -> Starlette:
    return Starlette(
        routes=[
            Route("/", home),
            Route("/login", login),
            Route("/whoami", whoami),
            Mount(PREFIX, app=cogworker.web.create_app(load_settings())),
        ],
        middleware=[
            Middleware(SessionMiddleware, secret_key="host-secret-for-tests", session_cookie=COOKIE),
            Middleware(RequireLogin),
        ],
    )
