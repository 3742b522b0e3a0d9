"""`/jobs/<jid>`: what is known of one job: where it is (a queue and its place in line, a running
process, the retry, scheduled or dead set) and its status hash, found by cogworker/ops/locate.py.
`/jobs?jid=...` (a search form's GET) leads there.

The sets and queues are searched a bounded stretch per request; when the stretch ends before the
job is found, the page links to the next one with the cursor as GET parameters (`place`, `at`,
`first`), so a long search is a bookmarkable series of short requests. A live refresh (app.js's
`X-Cogworker-Live` header) redraws only the running and status blocks and searches nothing.
The page's Cancel button (a waiting or running job) posts to `/jobs/cancel` (ops/cancel.py).
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import OpsError, locate
from cogworker.ops import cancel as cancel_ops
from cogworker.web.actions import action, field
from cogworker.web.render import page, path_to, redirect, segment
from cogworker.web.state import WebState, state_of

# Set name -> the UI path of its pages.
SET_PATHS = {"retry": "/retries", "scheduled": "/scheduled", "dead": "/dead"}
# A cursor's offset: digits, and no more of them than any set or queue could need.
MAX_OFFSET_DIGITS = 12
# The places a cursor puts first: at most two a status points at, and the three sets.
MAX_FIRST = 5


def cursor_from(query: QueryParams) -> tuple[locate.Cursor | None, bool]:
    """The cursor a "Continue searching" link carries, and whether the link was malformed (then
    the search starts again). Places are checked against the real ones by ops/locate."""
    place = query.get("place")
    if place is None:
        return None, False
    at = query.get("at", "0")
    first = tuple(query.getlist("first"))
    if (
        not place
        or not (at.isascii() and at.isdigit())
        or len(at) > MAX_OFFSET_DIGITS
        or len(first) > MAX_FIRST
    ):
        return None, True
    return locate.Cursor(place, int(at), first), False


def cursor_query(cursor: locate.Cursor) -> dict[str, Any]:
    """The GET parameters of a link that goes on from `cursor`."""
    return {"place": cursor.place, "at": str(cursor.offset), "first": list(cursor.first)}


def find(request: Request) -> Response:
    """The search form's target: a valid jid goes to its page, anything else back to the form."""
    jid = request.query_params.get("jid", "").strip()
    if jid and locate.valid_jid(jid):
        return redirect(path_to(request, "/jobs/" + segment(jid)))
    return page(
        request,
        "job.html",
        "Find a job",
        jid=jid,
        where=None,
        invalid=bool(jid),
        set_paths=SET_PATHS,
        status_ttl_s=0,
        bad_cursor=False,
        cursor_query=cursor_query,
    )


def job(request: Request) -> Response:
    jid = str(request.path_params["jid"])
    if not locate.valid_jid(jid):
        raise HTTPException(404, "No such job: a jid is letters, digits and _.:- (at most 100).")
    state = state_of(request)
    cursor, bad_cursor = cursor_from(request.query_params)
    live = request.headers.get("x-cogworker-live") == "1"
    where = locate.locate(state.client, state.scripts, jid, cursor, searching=not live)
    return page(
        request,
        "job.html",
        f"Job {jid}",
        jid=jid,
        where=where,
        invalid=False,
        set_paths=SET_PATHS,
        status_ttl_s=state.settings.status_ttl_s,
        bad_cursor=bad_cursor or (where.search is not None and where.search.restarted),
        cursor_query=cursor_query,
    )


def _cancel_question(state: WebState, form: FormData) -> str:
    return f"Cancel job {form.get('jid') or ''}? A waiting job never runs; a running one is cancelled."


@action("/jobs", confirm=_cancel_question)
def cancel(request: Request, state: WebState, form: FormData) -> str:
    """The job page's Cancel button (ops/cancel.py): the flash says which case applied."""
    try:
        outcome = cancel_ops.cancel(state.client, state.scripts, field(form, "jid"))
    except ValueError as exc:
        raise OpsError(str(exc)) from None
    return f"Job {outcome.jid}: {outcome.detail}."


ROUTES: list[BaseRoute] = [
    Route("/jobs", find, name="jobs_find"),
    # Before the page's path: it answers POST only, the page GET only.
    Route("/jobs/cancel", cancel, methods=["POST"]),
    Route("/jobs/{jid}", job, name="job"),
]
