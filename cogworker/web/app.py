"""`create_app`: the UI's routes and its middleware, as one Starlette application.

The page modules each own their routes (`ROUTES`); this file only puts them together with the
static files and the guards, outermost first: the state and security headers, HTTP Basic (when
credentials are set), the optional session, and the same-origin rule for POSTs.
"""

from __future__ import annotations

from importlib import resources

import redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from cogworker.redact import safe_url
from cogworker.settings import Settings, load_settings
from cogworker.store import shards
from cogworker.store.connection import is_unavailable
from cogworker.web import audit, batches, busy, dashboard, jobs, metrics_pages, periodic, queues, search, sets
from cogworker.web.render import page
from cogworker.web.security import BasicAuth, SameOrigin, StateAndHeaders
from cogworker.web.session import OptionalSession
from cogworker.web.state import ReadOnlyRule, UserOf, WebState, state_of


def routes() -> list[BaseRoute]:
    static_dir = str(resources.files("cogworker.web") / "static")
    return [
        Route("/", dashboard.dashboard, name="dashboard"),
        *busy.ROUTES,
        *queues.ROUTES,
        *sets.ROUTES,
        *periodic.ROUTES,
        *batches.ROUTES,
        *audit.ROUTES,
        *jobs.ROUTES,
        *search.ROUTES,
        *metrics_pages.ROUTES,
        Mount("/static", StaticFiles(directory=static_dir), name="static"),
    ]


def create_app(
    settings: Settings | None = None,
    *,
    read_only: ReadOnlyRule | None = None,
    user_of: UserOf | None = None,
) -> Starlette:
    """The Web UI as an ASGI app. `settings` default to the COGWORKER_* environment; `read_only`
    is the host's rule per request (True: show, never act), on top of COGWORKER_WEB_READ_ONLY;
    `user_of` names the user an action is recorded under when the host's login isn't Starlette's
    `request.user` (see web/audit.py); it is called on a worker thread, so it may block."""
    settings = settings if settings is not None else load_settings()
    shards.use_settings(settings)  # the pages show (and act on) this deployment's keys only
    state = WebState(settings, read_only, user_of)
    middleware = [Middleware(StateAndHeaders, state=state)]
    if settings.web_username:
        middleware.append(
            Middleware(
                BasicAuth,
                username=settings.web_username,
                password=settings.web_password.get_secret_value(),
            )
        )
    middleware += [
        Middleware(OptionalSession, secret_key=settings.web_session_secret.get_secret_value() or None),
        Middleware(SameOrigin, trust_forwarded=settings.web_trust_forwarded),
    ]
    app = Starlette(
        routes=routes(),
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, redis.RedisError: _redis_error},
    )
    app.state.cogworker = state
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "No such page." if exc.status_code == 404 else str(exc.detail)
    return page(request, "error.html", f"{exc.status_code}", status_code=exc.status_code, message=message)


async def _redis_error(request: Request, exc: Exception) -> Response:
    """Redis down or refusing: a page that says so (503), not a traceback."""
    settings = state_of(request).settings
    if is_unavailable(exc):
        message = f"Can't reach Redis at {safe_url(settings.redis_url)}: {exc}"
    else:
        message = f"Redis refused a command: {exc}. `cogworker doctor` checks key types."
    return page(request, "error.html", "Redis error", status_code=503, message=message)
