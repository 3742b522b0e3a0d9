"""How every POST runs: refused in read-only mode, the form read, the operation run off the event
loop (the ops functions are blocking Redis calls), its outcome flashed, and a 303 back to the page.

An operation says what it did by returning the flash text; an OpsError (not found, not retryable,
a wrong-type key) becomes an error flash with its message, and so does Redis being unreachable.
Either way the action is then logged and recorded with its user (web/audit.py, the "Recent actions"
page). Nothing an action does is reached by GET.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis
import structlog
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from cogworker.ops import OpsError
from cogworker.redact import safe_url
from cogworker.store.connection import is_unavailable
from cogworker.web.audit import record_action, user_name
from cogworker.web.render import back_to, flash, page, redirect
from cogworker.web.state import WebState, state_of

log = structlog.get_logger("cogworker.web")

# (request, state, form) -> the flash text saying what was done.
Operation = Callable[[Request, WebState, FormData], str]
Endpoint = Callable[[Request], Awaitable[Response]]
# (state, form) -> the question the confirmation page asks, or None when this form needs none (it
# acts at once). Run off the event loop, like an operation: a question may read Redis to say what
# the action reaches ("Pause intake on all 4 processes?").
Confirm = Callable[[WebState, FormData], str | None]


def action(default_back: str, confirm: Confirm | None = None) -> Callable[[Operation], Endpoint]:
    """An endpoint running `operation`. With `confirm`, a form without `confirm=yes` gets a page
    asking first (the question is `confirm(state, form)`; None runs the operation at once), whose
    button sends the same fields again with `confirm=yes`: a clear or a delete-all takes two
    deliberate clicks, with or without JavaScript."""

    def wrap(operation: Operation) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            state = state_of(request)
            if state.read_only(request):
                user = await user_name(request, state)
                log.warning("web_action_refused", path=request.url.path, reason="read-only", user=user)
                return PlainTextResponse("Forbidden: this UI is read-only.\n", status_code=403)
            form = await request.form()
            back = back_to(request, form.get("back"), default_back)
            question = None
            if confirm is not None and form.get("confirm") != "yes":
                question = await run_in_threadpool(confirm, state, form)
            if question is not None:
                hidden = [(k, v) for k, v in form.multi_items() if isinstance(v, str) and k != "confirm"]
                return page(
                    request,
                    "confirm.html",
                    "Please confirm",
                    question=question,
                    action_path=request.url.path,
                    hidden=hidden,
                    back=back,
                )
            reachable = True
            try:
                outcome, text = "ok", await run_in_threadpool(operation, request, state, form)
            except OpsError as exc:
                outcome, text = "error", str(exc)
            except redis.RedisError as exc:
                reachable = not is_unavailable(exc)
                if not reachable:
                    text = f"can't reach Redis at {safe_url(state.settings.redis_url)}: {exc}"
                else:
                    text = f"Redis refused a command: {exc}"
                outcome = "error"
            flash(request, outcome, text)
            # After the operation, whatever became of it: who did what is recorded (web/audit.py).
            await record_action(request, state, outcome, text, write=reachable)
            return redirect(back)

        endpoint.__name__ = operation.__name__
        endpoint.__doc__ = operation.__doc__
        return endpoint

    return wrap


def field(form: FormData, name: str) -> str:
    """A required text field; OpsError (shown as the flash) when it is missing."""
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise OpsError(f"the form sent no {name}")
    return value


def fields(form: FormData, name: str) -> list[str]:
    """Every value of a repeated field (the checkboxes of a selection)."""
    return [v for v in form.getlist(name) if isinstance(v, str) and v]
