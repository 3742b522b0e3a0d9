"""`/batches` and `/batches/<bid>`: the newest batches, and one batch's counts, times, failed members
and callbacks (api/batch_status.py, the data `cogworker batch show` prints), with the members that
fail and wait in the retry set and the pending members page by page (ops/batches.py). A batch is changed by
its members' ends; the one repair by hand is the page's "Release holds" button (POST
`/batches/release`, what `cogworker batch release` does: api/batch_holds.py), shown while a block
holds the batch."""

from __future__ import annotations

import re

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.api import batch_holds
from cogworker.api import batch_status as status_api
from cogworker.ops import OpsError
from cogworker.ops import batches as batch_ops
from cogworker.web.actions import action, field
from cogworker.web.render import page
from cogworker.web.state import WebState, state_of

# A bid is 24 hex digits (payload.new_jid); anything else can't be one.
_BID = re.compile(r"[0-9a-f]{1,64}")
LISTED = 100


PENDING_PER_PAGE = 50


def batches(request: Request) -> Response:
    client = state_of(request).client
    found = [s for bid in status_api.recent(LISTED, client) if (s := status_api.batch_status(bid, client))]
    undecided = [s.bid for s in found if not s.complete]
    failing = batch_ops.failing(client, undecided)
    return page(
        request,
        "batches.html",
        "Batches",
        batches=batch_ops.views(found, failing),
        searched=failing.searched,
    )


def _cursor(request: Request) -> int:
    """`?cursor=N`, where a page of pending members starts (an SSCAN cursor); else the start."""
    text = request.query_params.get("cursor", "0")
    return int(text) if text.isdigit() and len(text) <= 20 else 0


def batch(request: Request) -> Response:
    bid = str(request.path_params["bid"])
    if not _BID.fullmatch(bid):
        raise HTTPException(404, "No such batch: a bid is hexadecimal digits.")
    client = state_of(request).client
    found = status_api.batch_status(bid, client)
    if found is None:
        raise HTTPException(404, f"No batch {bid}: it never existed, or its records expired.")
    failing = batch_ops.failing(client, [] if found.complete else [bid])
    cursor = _cursor(request)
    pending = batch_ops.pending_page(client, bid, cursor, PENDING_PER_PAGE) if found.pending else None
    return page(
        request,
        "batch.html",
        f"Batch {bid}",
        batch=found,
        view=batch_ops.BatchView(found, failing.of(bid)),
        searched=failing.searched,
        failing={m.jid: m for m in failing.of(bid)},
        pending=pending,
        cursor=cursor,
    )


def _release_question(state: WebState, form: FormData) -> str:
    return (
        f"Release every hold on batch {form.get('bid') or ''}? Do it only when the block that held it is "
        "gone: a block still pushing to it would see the batch complete before its last push."
    )


@action("/batches", confirm=_release_question)
def release(request: Request, state: WebState, form: FormData) -> str:
    """The batch page's "Release holds" button: the flash says how many were released."""
    bid = field(form, "bid")
    if not _BID.fullmatch(bid):
        raise OpsError(f"no batch {bid}: a bid is hexadecimal digits")
    released = batch_holds.release_all(state.client, bid, state.settings.batch_ttl_s)
    if released is None:
        raise OpsError(f"no batch {bid}: it never existed, or its records expired")
    return f"Batch {bid}: " + (f"released {released} hold(s)." if released else "no hold to release.")


ROUTES: list[BaseRoute] = [
    Route("/batches", batches, name="batches"),
    # Before the page's path: it answers POST only, the page GET only.
    Route("/batches/release", release, methods=["POST"]),
    Route("/batches/{bid}", batch, name="batch"),
]
