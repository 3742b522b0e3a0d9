"""`/queues` and `/queues/<name>`: every known queue with its size, latency and paused state, one
queue's jobs page by page, and the actions (pause, resume, clear, delete one job).

Queues are implicit (a push creates one), so a valid name nobody pushed to is an empty queue, not
a missing page; only a name no queue can have is a 404. The actions take the queue's name from the
form, not the path, so a queue named like an action ("pause") still has its own page.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import OpsError
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name
from cogworker.web.actions import action, field
from cogworker.web.pagination import PER_PAGE, numbered, page_number, start_of
from cogworker.web.render import page, segment
from cogworker.web.state import WebState, state_of


def queues(request: Request) -> Response:
    served = process_ops.served_queues(state_of(request).client)
    unserved = [q for q in served if q.unserved]
    return page(request, "queues.html", "Queues", queues=served, unserved=unserved)


# The queue page's two orders: "newest" (the left end, where pushes land: LRANGE's own order) and
# "next" (the right end, which every fetch pops first: what runs next is the first row).
ORDERS = ("newest", "next")


def queue(request: Request) -> Response:
    name = request.path_params["name"]
    if not is_queue_name(name):
        raise HTTPException(404, f"not a queue name: {QUEUE_NAME_RULE}")
    client = state_of(request).client
    order = request.query_params.get("order", "newest")
    order = order if order in ORDERS else "newest"
    [served] = process_ops.served_queues(client, [name])
    number = page_number(request)
    start = start_of(number)
    jobs = queue_ops.jobs_page(client, name, start, PER_PAGE, next_first=order == "next")
    return page(
        request,
        "queue.html",
        f"Queue {name}",
        queue=served.info,
        served=served,
        # Each row's place in the order shown: 1 is the newest, or (next first) the next to run.
        jobs=[(start + offset + 1, job) for offset, job in enumerate(jobs)],
        pages=numbered(request, f"/queues/{segment(name)}", number, served.info.size, order=_kept(order)),
        page_number=number,
        order=order,
    )


def _kept(order: str) -> str | None:
    """The order as the links carry it: the default is left out, so the plain URL stays plain."""
    return None if order == "newest" else order


def _queue_name(form: FormData) -> str:
    name = field(form, "name")
    if not is_queue_name(name):
        raise OpsError(f"not a queue name: {QUEUE_NAME_RULE}")
    return name


@action("/queues")
def pause(request: Request, state: WebState, form: FormData) -> str:
    name = _queue_name(form)
    if queue_ops.pause(state.client, name):
        return f"Queue {name} paused: no process fetches from it until it is resumed."
    return f"Queue {name} was already paused."


@action("/queues")
def resume(request: Request, state: WebState, form: FormData) -> str:
    name = _queue_name(form)
    if queue_ops.resume(state.client, name):
        return f"Queue {name} resumed."
    return f"Queue {name} was not paused."


def _clear_question(state: WebState, form: FormData) -> str:
    name = str(form.get("name") or "")
    size = form.get("size")
    count = f"{int(size):,}" if isinstance(size, str) and size.isdigit() else "the"
    return f"Delete all {count} jobs waiting in queue {name}?"


@action("/queues", confirm=_clear_question)
def clear(request: Request, state: WebState, form: FormData) -> str:
    name = _queue_name(form)
    removed = queue_ops.clear(state.client, name)
    return f"Queue {name} cleared: {removed:,} job{'' if removed == 1 else 's'} deleted."


@action("/queues")
def delete(request: Request, state: WebState, form: FormData) -> str:
    name, jid = _queue_name(form), field(form, "jid")
    try:
        index = int(field(form, "index"))
        # The queue partition the job was shown in (the sharded layout's; 0, or absent, otherwise).
        partition = int(str(form.get("partition") or 0))
    except ValueError:
        raise OpsError("the form sent no valid index") from None
    job = queue_ops.delete_job(state.client, name, jid, index, partition)
    return f"Job {jid} ({job.job or 'unreadable'}) deleted from queue {name}."


ROUTES: list[BaseRoute] = [
    Route("/queues", queues, name="queues"),
    # The actions come before the page's catch-all path; they answer POST only, the page GET only.
    Route("/queues/pause", pause, methods=["POST"]),
    Route("/queues/resume", resume, methods=["POST"]),
    Route("/queues/clear", clear, methods=["POST"]),
    Route("/queues/delete", delete, methods=["POST"]),
    Route("/queues/{name:path}", queue, name="queue"),
]
