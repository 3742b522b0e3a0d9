"""`/jobs/<jid>`: what is known of one job: where it is (a queue and its place in line, a running
process, the retry, scheduled or dead set) and its status hash, found by cogworker/ops/locate.py in
a few commands whatever the sets' sizes. `/jobs?jid=...` (a search form's GET) leads there.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import locate
from cogworker.web.render import page, path_to, redirect, segment
from cogworker.web.state import state_of

# Set name -> the UI path of its pages.
SET_PATHS = {"retry": "/retries", "scheduled": "/scheduled", "dead": "/dead"}


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
    )


def job(request: Request) -> Response:
    jid = str(request.path_params["jid"])
    if not locate.valid_jid(jid):
        raise HTTPException(404, "No such job: a jid is letters, digits and _.:- (at most 100).")
    state = state_of(request)
    where = locate.locate(state.client, state.scripts, jid)
    return page(
        request,
        "job.html",
        f"Job {jid}",
        jid=jid,
        where=where,
        invalid=False,
        set_paths=SET_PATHS,
        status_ttl_s=state.settings.status_ttl_s,
    )


ROUTES: list[BaseRoute] = [
    Route("/jobs", find, name="jobs_find"),
    Route("/jobs/{jid}", job, name="job"),
]
