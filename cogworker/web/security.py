"""The UI's guards, as plain ASGI middleware: response headers, HTTP Basic, the same-origin rule.

No state changes through GET (the routes take actions by POST only), and a POST is refused (403,
logged) unless the browser says it comes from this origin: `Sec-Fetch-Site: same-origin`, or, from a
browser that doesn't send that header, an `Origin` equal to the address the request was sent to. That
is Sidekiq 8.1's answer to the years of "Forbidden" reports its session-bound tokens caused, and it
needs no token in every form. Behind a reverse proxy the Host the app sees is the proxy's upstream
address, so with COGWORKER_WEB_TRUST_FORWARDED=true the expected origin is built from the proxy's
X-Forwarded-Proto and X-Forwarded-Host instead.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable

import structlog
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cogworker.web.state import SCOPE_KEY, WebState

log = structlog.get_logger("cogworker.web")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Where BasicAuth leaves the name it let in, for the audit trail (web/audit.py).
BASIC_USER_KEY = "cogworker.basic_user"

# No inline script or style anywhere (the pages' JavaScript and CSS are files under static/), so
# stored job data that slips past escaping still can't run. `frame-ancestors 'self'` stops another
# site framing the UI to trick a click.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'self'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"SAMEORIGIN"),
)


class StateAndHeaders:
    """Outermost: puts the app's WebState in the scope and adds the security headers to every
    response the UI sends (the host's own pages are not touched)."""

    def __init__(self, app: ASGIApp, state: WebState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[SCOPE_KEY] = self.state

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def credentials_match(header: str | None, username: str, password: str) -> bool:
    """An `Authorization: Basic` header against the configured pair, in constant time (both halves
    are always compared, so the time doesn't say which one was wrong)."""
    if not header or not header.lower().startswith("basic "):
        return False
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    given_user, _, given_password = decoded.partition(":")
    user_ok = hmac.compare_digest(given_user.encode(), username.encode())
    password_ok = hmac.compare_digest(given_password.encode(), password.encode())
    return user_ok and password_ok


class BasicAuth:
    """HTTP Basic on every request, when COGWORKER_WEB_USERNAME/PASSWORD are set."""

    def __init__(self, app: ASGIApp, username: str, password: str) -> None:
        self.app = app
        self.username = username
        self.password = password

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = Headers(scope=scope).get("authorization")
            if not credentials_match(header, self.username, self.password):
                response = PlainTextResponse(
                    "Authentication required.\n",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="cogworker", charset="UTF-8"'},
                )
                await response(scope, receive, send)
                return
            scope[BASIC_USER_KEY] = self.username
        await self.app(scope, receive, send)


def expected_origins(headers: Headers, scope: Scope, trust_forwarded: bool) -> set[str]:
    """The origin(s) a same-origin request names: the scheme and host it was sent to."""
    scheme = str(scope.get("scheme", "http"))
    host = headers.get("host", "")
    if trust_forwarded:
        # A proxy chain may append: the first value is what the browser used.
        scheme = _first(headers.get("x-forwarded-proto")) or scheme
        host = _first(headers.get("x-forwarded-host")) or host
    if not host:
        return set()
    origins = {f"{scheme}://{host}".lower()}
    default_port = {"http": ":80", "https": ":443"}.get(scheme)
    if default_port and host.endswith(default_port):
        origins.add(f"{scheme}://{host.removesuffix(default_port)}".lower())
    return origins


def _first(value: str | None) -> str | None:
    return value.split(",")[0].strip() if value else None


def refusal(headers: Headers, scope: Scope, trust_forwarded: bool) -> str | None:
    """Why a state-changing request isn't same-origin, or None when it is."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return None if site == "same-origin" else f"Sec-Fetch-Site is {site!r}"
    origin = headers.get("origin")
    if origin is None:
        return "the request names no origin (neither Sec-Fetch-Site nor Origin)"
    if origin.lower() in expected_origins(headers, scope, trust_forwarded):
        return None
    return f"Origin {origin!r} is not this site"


class SameOrigin:
    """Refuses every POST (any method but GET/HEAD/OPTIONS) that a browser didn't send from the UI."""

    def __init__(self, app: ASGIApp, trust_forwarded: bool) -> None:
        self.app = app
        self.trust_forwarded = trust_forwarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = Headers(scope=scope)
            why = refusal(headers, scope, self.trust_forwarded)
            if why is not None:
                log.warning(
                    "web_post_refused",
                    path=str(scope.get("root_path", "")) + str(scope.get("path", "")),
                    method=scope["method"],
                    reason=why,
                    client=_client_address(scope),
                )
                response = PlainTextResponse(f"Forbidden: not a same-origin request ({why}).\n", 403)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _client_address(scope: Scope) -> str | None:
    client: Iterable[object] | None = scope.get("client")
    return ":".join(str(part) for part in client) if client else None
