"""The UI's own session cookie, applied only when the host app provides no session.

Mounted inside an app that has its own (Starlette's SessionMiddleware in front), an unconditional
session here would replace the host's session with a copy for every request inside the UI: the host's
auth middleware would read the copy, never its real session, and every response would carry a second
cookie. So the UI looks at the request's scope: where no middleware in front has put a `session`
there, it wraps the request in its own signed cookie (`cogworker_session`); where one has, the request
passes through untouched and the UI's flash messages live in the host's session.
"""

from __future__ import annotations

import secrets

from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "cogworker_session"


class OptionalSession:
    def __init__(self, app: ASGIApp, secret_key: str | None) -> None:
        self.app = app
        self.with_session = SessionMiddleware(
            app,
            secret_key=secret_key or secrets.token_urlsafe(32),
            session_cookie=COOKIE,
            same_site="strict",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "session" not in scope:
            await self.with_session(scope, receive, send)
        else:
            await self.app(scope, receive, send)
