"""`/periodic`: every periodic entry the fleet has registered in Redis, and "Enqueue now".

The listing and the push are cogworker/ops/periodic.py's, the ones `cogworker periodic list` and
`cogworker periodic enqueue NAME` use, so the page and the CLI agree.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import periodic as periodic_ops
from cogworker.ops import redis_time
from cogworker.web.actions import action, field
from cogworker.web.render import flash, page
from cogworker.web.state import WebState, state_of


def periodic(request: Request) -> Response:
    client = state_of(request).client
    now = redis_time(client)
    return page(request, "periodic.html", "Periodic", entries=periodic_ops.entries(client, now), now=now)


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


ROUTES: list[BaseRoute] = [
    Route("/periodic", periodic, name="periodic"),
    Route("/periodic/enqueue", enqueue_now, methods=["POST"], name="periodic_enqueue"),
]
