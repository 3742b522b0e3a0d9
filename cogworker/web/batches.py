"""`/batches` and `/batches/<bid>`: the newest batches, and one batch's counts, times, failed members
and callbacks (api/batch_status.py, the data `cogworker batch show` prints). Read-only: a batch is
changed by its members' ends, never by hand."""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.api import batch_status as status_api
from cogworker.web.render import page
from cogworker.web.state import state_of

# A bid is 24 hex digits (payload.new_jid); anything else can't be one.
_BID = re.compile(r"[0-9a-f]{1,64}")
LISTED = 100


def batches(request: Request) -> Response:
    client = state_of(request).client
    found = [s for bid in status_api.recent(LISTED, client) if (s := status_api.batch_status(bid, client))]
    return page(request, "batches.html", "Batches", batches=found)


def batch(request: Request) -> Response:
    bid = str(request.path_params["bid"])
    if not _BID.fullmatch(bid):
        raise HTTPException(404, "No such batch: a bid is hexadecimal digits.")
    found = status_api.batch_status(bid, state_of(request).client)
    if found is None:
        raise HTTPException(404, f"No batch {bid}: it never existed, or its records expired.")
    return page(request, "batch.html", f"Batch {bid}", batch=found)


ROUTES: list[BaseRoute] = [
    Route("/batches", batches, name="batches"),
    Route("/batches/{bid}", batch, name="batch"),
]
