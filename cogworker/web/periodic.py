"""`/periodic`: every periodic entry the fleet has registered in Redis, what became of its last slot,
a page per entry with its last runs, and "Enqueue now", pause and resume.

The listing, the history and the actions are cogworker/ops/periodic.py's, the ones `cogworker periodic
list|enqueue|pause|resume` use, so the page and the CLI agree.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import NotFound, redis_time
from cogworker.ops import periodic as periodic_ops
from cogworker.web.actions import action, field
from cogworker.web.render import flash, page
from cogworker.web.state import WebState, state_of


def periodic(request: Request) -> Response:
    state = state_of(request)
    now = redis_time(state.client)
    found = periodic_ops.entries(state.client, now, settle_s=periodic_ops.settle_s(state.settings))
    return page(request, "periodic.html", "Periodic", entries=found, now=now)


def entry(request: Request) -> Response:
    state = state_of(request)
    name = str(request.path_params["name"])
    now = redis_time(state.client)
    try:
        found = periodic_ops.get(state.client, name, now, settle_s=periodic_ops.settle_s(state.settings))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    return page(request, "periodic_entry.html", f"Periodic: {name}", e=found, now=now)


@action("/periodic")
def enqueue_now(request: Request, state: WebState, form: FormData) -> str:
    """Push the entry's job now, with its arguments, to its queue (outside its schedule)."""
    name = field(form, "name")
    result = periodic_ops.enqueue_now(state.client, state.settings, name)
    for warning in result.warnings:
        flash(request, "warn", warning)
    if result.jid is None:
        return f"{name}: {result.job} not pushed: a client middleware stopped it (a duplicate unique job?)"
    return f"{name}: {result.job} pushed to queue {result.queue} as {result.jid}"


def _pause_question(state: WebState, form: FormData) -> str:
    return (
        f"Pause periodic entry {form.get('name')}? Its slots enqueue nothing until it is resumed "
        "(on every process), and the slots it is paused for are not caught up."
    )


@action("/periodic", confirm=_pause_question)
def pause(request: Request, state: WebState, form: FormData) -> str:
    """Pause the entry on every process, from its next slot on."""
    name = field(form, "name")
    if periodic_ops.pause(state.client, name):
        return f"{name}: paused; its slots are recorded as paused and enqueue nothing until it is resumed"
    return f"{name}: already paused"


@action("/periodic")
def resume(request: Request, state: WebState, form: FormData) -> str:
    """Resume the entry: its next slot runs as planned, with no catch-up of the paused ones."""
    name = field(form, "name")
    if periodic_ops.resume(state.client, name):
        return f"{name}: resumed; its next slot runs as planned"
    return f"{name}: was not paused"


ROUTES: list[BaseRoute] = [
    Route("/periodic", periodic, name="periodic"),
    Route("/periodic/enqueue", enqueue_now, methods=["POST"], name="periodic_enqueue"),
    Route("/periodic/pause", pause, methods=["POST"], name="periodic_pause"),
    Route("/periodic/resume", resume, methods=["POST"], name="periodic_resume"),
    Route("/periodic/entries/{name:path}", entry, name="periodic_entry"),
]
