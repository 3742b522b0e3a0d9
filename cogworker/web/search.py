"""`/search?q=...`: the header's search box. A jid as cogworker makes them (24 hex digits) goes
straight to its job page; any other text is looked for in the jobs' arguments and classes across
the queues and the retry, scheduled and dead sets (ops/search.py), one time budget per request.
When the budget runs out first the page says so and links to the rest (`place`, `at`: the same
cursor parameters as the job page's "Continue searching").
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import locate
from cogworker.ops import search as search_ops
from cogworker.web.jobs import SET_PATHS, cursor_from, cursor_query
from cogworker.web.render import page, path_to, redirect, segment
from cogworker.web.state import state_of

GENERATED_JID = re.compile(r"[0-9a-f]{24}")


def search(request: Request) -> Response:
    text = request.query_params.get("q", "").strip()
    if GENERATED_JID.fullmatch(text):
        return redirect(path_to(request, "/jobs/" + segment(text)))
    found, problem = None, None
    cursor, bad_cursor = cursor_from(request.query_params)
    if len(text) > search_ops.MAX_QUERY:
        problem = f"Search for at most {search_ops.MAX_QUERY} characters."
    elif text and request.headers.get("x-cogworker-live") != "1":  # a live refresh searches nothing
        found = search_ops.search(
            state_of(request).client, text, cursor, search_ops.BUDGET_S, slice_size=search_ops.SLICE
        )
    return page(
        request,
        "search.html",
        f"Search: {text}" if text else "Search",
        text=text,
        found=found,
        problem=problem,
        bad_cursor=bad_cursor or (found is not None and found.restarted),
        # Words are valid jids too (a caller may choose its own): offer that page beside the matches.
        jid_link=path_to(request, "/jobs/" + segment(text)) if text and locate.valid_jid(text) else None,
        set_paths=SET_PATHS,
        cursor_query=cursor_query,
        budget_ms=round(search_ops.BUDGET_S * 1000),
    )


ROUTES: list[BaseRoute] = [Route("/search", search, name="search")]
