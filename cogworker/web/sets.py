"""The retry, scheduled and dead pages: a listing per set (paginated, or a bounded search when a
filter is set) and one entry's page; their POST actions are in set_actions_web.py.

A listing reads one slice of the set (ZCARD + ZRANGE), whatever its size. A filter can't be
answered from a slice, and reading a set of a hundred thousand to filter it would make the page as
slow as the set is big, so a filtered listing examines at most SEARCH_BUDGET entries from a scan
position (`?from=N`) and links to the next stretch. An entry's page finds it by its key
(`<score>-<ref>`) with one ZRANGEBYSCORE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import sets as set_ops
from cogworker.web import set_actions_web
from cogworker.web.pagination import PER_PAGE, Pager, numbered, page_number, start_of
from cogworker.web.render import page, path_to
from cogworker.web.set_actions_web import SET_PATHS, filter_from
from cogworker.web.state import state_of

TITLES = {"retry": "Retries", "scheduled": "Scheduled", "dead": "Dead"}
WHEN = {"retry": "Next try", "scheduled": "Due", "dead": "Died"}
EMPTY = {"retry": "No retries.", "scheduled": "No scheduled jobs.", "dead": "No dead jobs."}
# Entries a filtered listing examines per request: a bounded cost (a few ZRANGE slices) per page.
SEARCH_BUDGET = 2_000
MAX_FROM = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Searched:
    """What a filtered listing looked through: entries first..last (1-based) of total."""

    first: int
    last: int
    total: int


def _scan_position(request: Request) -> int:
    try:
        return min(MAX_FROM, max(0, int(request.query_params.get("from", "0"))))
    except ValueError:
        return 0


def _query(params: Mapping[str, str]) -> dict[str, str | None]:
    """The filter and order fields a listing's links keep (empty ones are left out of URLs)."""
    return {
        "job": params.get("job") or None,
        "error": params.get("error") or None,
        "args": params.get("args") or None,
        "order": "asc" if params.get("order") == "asc" else None,
    }


def _listing(request: Request, set_name: str) -> Response:
    client = state_of(request).client
    path = SET_PATHS[set_name]
    query = _query(request.query_params)
    match = filter_from(request.query_params)
    desc = query["order"] != "asc"
    searched: Searched | None = None
    if match.empty:
        number = page_number(request)
        total = set_ops.size(client, set_name)
        entries = set_ops.page(client, set_name, start_of(number), PER_PAGE, desc)
        pager = numbered(
            request,
            path,
            number,
            total,
            job=query["job"],
            error=query["error"],
            args=query["args"],
            order=query["order"],
        )
    else:
        start = _scan_position(request)
        result = set_ops.search(client, set_name, match, start, SEARCH_BUDGET, PER_PAGE, desc)
        entries, total = result.found, result.total
        searched = Searched(min(start + 1, result.end), result.end, total)
        pager = Pager(
            f"{len(entries)} match{'' if len(entries) == 1 else 'es'}",
            first_url=path_to(request, path, **query) if start > 0 else None,
            next_url=None if result.finished else path_to(request, path, **query, **{"from": result.end}),
        )
    return page(
        request,
        "set_list.html",
        TITLES[set_name],
        set_name=set_name,
        path=path,
        entries=entries,
        total=total,
        pager=pager,
        searched=searched,
        query=query,
        filtered=not match.empty,
        desc=desc,
        when_label=WHEN[set_name],
        empty_text=EMPTY[set_name],
        killable=set_name in set_actions_web.KILLABLE,
        bulk_fields={k: v or "" for k, v in query.items() if k != "order"} | {"count": str(total)},
    )


def backtrace_text(lines: list[str] | None) -> str | None:
    """The backtrace filed with the failure (ops/sets.py `Entry.backtrace`), as one text."""
    return "\n".join(lines) if lines else None


def _entry(request: Request, set_name: str) -> Response:
    key = str(request.path_params["key"])
    parsed = set_ops.parse_key(key)
    if parsed is None:
        raise HTTPException(404, f"{key!r} is not an entry key")
    score, ref = parsed
    entry = set_ops.at_score(state_of(request).client, set_name, score, ref)
    if entry is None:
        raise HTTPException(404, f"no entry {key} in the {set_name} set")
    return page(
        request,
        "set_entry.html",
        f"{TITLES[set_name]}: {entry.job or 'unreadable entry'}",
        set_name=set_name,
        path=SET_PATHS[set_name],
        set_title=TITLES[set_name],
        entry=entry,
        backtrace=backtrace_text(entry.backtrace),
        when_label=WHEN[set_name],
        killable=set_name in set_actions_web.KILLABLE,
    )


def _for_set(handler: Callable[[Request, str], Response], set_name: str) -> Callable[[Request], Response]:
    # A plain function per set (Starlette treats a functools.partial as an ASGI app, not a handler).
    def endpoint(request: Request) -> Response:
        return handler(request, set_name)

    endpoint.__name__ = f"{handler.__name__.strip('_')}_{set_name}"
    return endpoint


def _routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for set_name, path in SET_PATHS.items():
        routes.append(Route(path, _for_set(_listing, set_name), methods=["GET"]))
        # The actions (POST, fixed names) come before the entry page, whose key takes any path.
        routes += set_actions_web.routes_for(set_name)
        routes.append(Route(path + "/{key:path}", _for_set(_entry, set_name), methods=["GET"]))
    return routes


ROUTES: list[BaseRoute] = _routes()
