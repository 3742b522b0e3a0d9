"""The audit trail: who took each action (`record_action`, called by web/actions.py after every
action), and `/actions`, the "Recent actions" page that lists them, newest first.

Who, first found of:
1. the host's `user_of(request)` hook given to `create_app` (for a login Starlette doesn't know of);
2. the HTTP Basic user the UI's own BasicAuth let in (COGWORKER_WEB_USERNAME);
3. an authenticated `request.user`, which a host's Starlette AuthenticationMiddleware puts in the
   scope the mounted UI shares (its `display_name`, else its text);
4. "anonymous".

Each action is logged (`web_action`, with `user=`) and recorded in Redis (ops/audit.py). The record is
written once, after the action, and a failure to write it is logged, not shown as the action's
failure: the action has happened, and retrying a write whose reply was lost would record it twice.
An action refused by read-only mode is logged (`web_action_refused`, with the user) but not recorded:
a read-only UI writes nothing to Redis, and may run as an ACL user that can't.
"""

from __future__ import annotations

import time

import redis
import structlog
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.formats import duration
from cogworker.ops import audit as audit_ops
from cogworker.store.connection import is_unavailable
from cogworker.web.pagination import numbered, page_number
from cogworker.web.render import page
from cogworker.web.security import BASIC_USER_KEY
from cogworker.web.state import WebState, state_of

log = structlog.get_logger("cogworker.web")

ANONYMOUS = "anonymous"
PER_PAGE = 50


def who(request: Request, state: WebState) -> str:
    """The name an action is recorded under (see the module's docstring for the order)."""
    if state.user_of is not None:
        named = state.user_of(request)
        if named:
            return str(named)
    basic = request.scope.get(BASIC_USER_KEY)
    if isinstance(basic, str) and basic:
        return basic
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        name = getattr(user, "display_name", None) or str(user)
        if name:
            return str(name)
    return ANONYMOUS


async def user_name(request: Request, state: WebState) -> str:
    """`who`, on a worker thread when the host's hook is set: it may block (a session looked up in
    the host's database), and the event loop serves every other request meanwhile."""
    if state.user_of is None:
        return who(request, state)
    return await run_in_threadpool(who, request, state)


def remote_address(request: Request) -> str | None:
    return request.client.host if request.client else None


async def record_action(
    request: Request, state: WebState, outcome: str, did: str, *, write: bool = True
) -> None:
    """Log the action and record it in Redis (unless `write` is False: Redis was unreachable for
    the action itself, so the record would only wait for the same timeout and fail)."""
    entry = audit_ops.AuditRecord(
        at=time.time(),
        user=await user_name(request, state),
        path=request.url.path,
        did=did,
        outcome=outcome,
        remote=remote_address(request),
    )
    log.info("web_action", path=entry.path, outcome=outcome, did=did, user=entry.user, client=entry.remote)
    if not write:
        return
    try:
        await run_in_threadpool(audit_ops.record, state.client, entry)
    except redis.RedisError as exc:
        log.warning(
            "web_action_unrecorded",
            path=entry.path,
            user=entry.user,
            error=f"{type(exc).__name__}: {exc}",
            note="the action was taken; only its audit record may be missing"
            if is_unavailable(exc)
            else "the action was taken; its audit record was refused",
        )


def ago(now: float, at: float) -> str:
    return f"{duration(max(0.0, now - at))} ago"


def actions(request: Request) -> Response:
    client = state_of(request).client
    number = page_number(request)
    records, total = audit_ops.recent(client, PER_PAGE, (number - 1) * PER_PAGE)
    return page(
        request,
        "actions.html",
        "Recent actions",
        records=records,
        total=total,
        kept=audit_ops.AUDIT_KEPT,
        now=time.time(),
        ago=ago,
        pages=numbered(request, "/actions", number, total, PER_PAGE),
    )


ROUTES: list[BaseRoute] = [Route("/actions", actions, name="actions")]
