"""The retry, scheduled and dead pages: a listing per set (paginated, or a time-budgeted search when
a filter is set) and one entry's page; their POST actions are in set_actions_web.py, the grouped
view in set_groups_web.py.

A listing reads one slice of the set (ZCARD + ZRANGE), whatever its size. A filter can't be
answered from a slice, so a filtered listing reads the set in slices from a scan position
(`?from=N`) until a page of matches is found, the set is exhausted or SEARCH_BUDGET_S has passed;
then the page says how far it got and links to where it stopped ("Continue"). An entry's page finds
it by its key (`<score>-<ref>`) with one ZRANGEBYSCORE.

Orders: retries and scheduled jobs open with the one due next (ascending score), dead with the
newest (descending); `?order=` names the other way, and every link keeps it with the filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.api import backtrace
from cogworker.ops import set_search
from cogworker.ops import sets as set_ops
from cogworker.web import set_actions_web, set_groups_web
from cogworker.web.pagination import PER_PAGE, Pager, numbered, page_number, start_of
from cogworker.web.render import page, path_to
from cogworker.web.set_actions_web import SET_PATHS, filter_from
from cogworker.web.state import state_of

TITLES = {"retry": "Retries", "scheduled": "Scheduled", "dead": "Dead"}
WHEN = {"retry": "Next try", "scheduled": "Due", "dead": "Died"}
EMPTY = {"retry": "No retries.", "scheduled": "No scheduled jobs.", "dead": "No dead jobs."}
# How long a filtered listing reads the set per request before it says how far it got. Within the
# project's page target (`make bench`: every page's p99 under 100 ms), so a filter with no match
# over a set of millions costs what any page costs, a Live refresh of it too; with the raw-text
# pre-check (ops/sets.py `Filter.may_match`) that is tens of thousands of entries on a quiet server.
# The budget is checked between slices, so a page may overrun it by one slice (500 entries: about
# 20 ms for an args filter, which decodes each), then draws the summary bar and the table: 80 ms
# put the args filter's p99 at 101 ms (`make bench --only webscale`), 50 ms leaves that room.
SEARCH_BUDGET_S = 0.05
MAX_FROM = 1_000_000_000
# Each set's opening order (True: highest score first) and its two labels, opening order first.
OPENS_DESC = {"retry": False, "scheduled": False, "dead": True}
ORDER_LABELS = {
    "retry": ("Next first", "Latest first"),
    "scheduled": ("Next first", "Latest first"),
    "dead": ("Newest first", "Oldest first"),
}
# The filter fields a listing's links and forms keep: `class` and `error_class` are exact (a group).
FILTER_FIELDS = ("job", "error", "args", "class", "error_class")


@dataclass(frozen=True, slots=True)
class Searched:
    """What a filtered listing looked through: entries first..last (1-based) of total."""

    first: int
    last: int
    total: int
    matches: int
    out_of_time: bool
    continue_url: str | None  # where the search goes on, when it stopped before the set's end


@dataclass(frozen=True, slots=True)
class Order:
    label: str
    url: str
    here: bool


def _scan_position(request: Request) -> int:
    try:
        return min(MAX_FROM, max(0, int(request.query_params.get("from", "0"))))
    except ValueError:
        return 0


def is_desc(set_name: str, params: Mapping[str, str]) -> bool:
    """The listing's order: `?order=asc|desc`, else the set's opening order."""
    asked = params.get("order")
    return asked == "desc" if asked in ("asc", "desc") else OPENS_DESC[set_name]


def _query(set_name: str, params: Mapping[str, str]) -> dict[str, str | None]:
    """The filter and order fields a listing's links keep (empty ones are left out of URLs; the
    order only when it isn't the set's opening one)."""
    kept: dict[str, str | None] = {name: params.get(name) or None for name in FILTER_FIELDS}
    desc = is_desc(set_name, params)
    kept["order"] = None if desc == OPENS_DESC[set_name] else ("desc" if desc else "asc")
    return kept


def _orders(request: Request, set_name: str, query: dict[str, str | None]) -> list[Order]:
    """The two order links, opening order first: each the true opposite of the other."""
    path = SET_PATHS[set_name]
    desc = is_desc(set_name, request.query_params)
    filters = {k: v for k, v in query.items() if k != "order"}
    opening, other = ORDER_LABELS[set_name]
    other_order = "asc" if OPENS_DESC[set_name] else "desc"
    return [
        Order(opening, path_to(request, path, **filters), desc == OPENS_DESC[set_name]),
        Order(other, path_to(request, path, **filters, order=other_order), desc != OPENS_DESC[set_name]),
    ]


def _filtered(
    request: Request, set_name: str, match: set_ops.Filter, query: dict[str, str | None], desc: bool
) -> tuple[list[set_ops.Entry], int, Pager, Searched]:
    path = SET_PATHS[set_name]
    start = _scan_position(request)
    client = state_of(request).client
    result = set_search.search(
        client, set_name, match, start, limit=PER_PAGE, desc=desc, budget_s=SEARCH_BUDGET_S
    )
    onward = None if result.finished else path_to(request, path, **query, **{"from": result.end})
    searched = Searched(
        min(start + 1, result.end), result.end, result.total, len(result.found), result.out_of_time, onward
    )
    matches = f"{len(result.found)} match{'' if len(result.found) == 1 else 'es'}"
    pager = Pager(
        matches,
        first_url=path_to(request, path, **query) if start > 0 else None,
        next_url=None if result.out_of_time else onward,
    )
    return result.found, result.total, pager, searched


def _listing(request: Request, set_name: str) -> Response:
    client = state_of(request).client
    path = SET_PATHS[set_name]
    query = _query(set_name, request.query_params)
    match = filter_from(request.query_params)
    desc = is_desc(set_name, request.query_params)
    searched: Searched | None = None
    if match.empty:
        number = page_number(request)
        total = set_ops.size(client, set_name)
        entries = set_ops.page(client, set_name, start_of(number), PER_PAGE, desc)
        pager = numbered(request, path, number, total, PER_PAGE, **query)
    else:
        entries, total, pager, searched = _filtered(request, set_name, match, query, desc)
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
        budget_ms=round(SEARCH_BUDGET_S * 1000),
        query=query,
        orders=_orders(request, set_name, query),
        filtered=not match.empty,
        when_label=WHEN[set_name],
        empty_text=EMPTY[set_name],
        killable=set_name in set_actions_web.KILLABLE,
        has_errors=set_name != "scheduled",
        groupable=set_name in set_groups_web.GROUPED,
        retry_label="Enqueue now" if set_name == "scheduled" else "Retry now",
        bulk_fields={k: v for k, v in query.items() if v and k != "order"} | {"count": str(total)},
    )


def backtrace_lines(lines: list[str] | None) -> list[tuple[str, str]]:
    """The backtrace filed with the failure (ops/sets.py `Entry.backtrace`), each line with its
    kind for the page to set apart: a frame's file line, the sentence joining two exceptions of a
    chain, a line saying what was cut, an exception's class and message, or source."""
    kinds: list[tuple[str, str]] = []
    for line in lines or []:
        stripped = line.strip()
        if stripped.startswith("File "):
            kind = "frame"
        elif stripped.startswith("…"):
            kind = "omitted"
        elif line in (backtrace.CAUSE, backtrace.CONTEXT):
            kind = "link"
        elif not line or line == backtrace.HEADER:
            kind = "header"
        elif not line.startswith(" "):
            kind = "error"
        else:
            kind = "source"
        kinds.append((kind, line))
    return kinds


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
        backtrace=backtrace_lines(entry.backtrace),
        when_label=WHEN[set_name],
        killable=set_name in set_actions_web.KILLABLE,
        retry_label="Enqueue now" if set_name == "scheduled" else "Retry now",
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
        routes += set_groups_web.routes_for(set_name)
        # The actions (POST, fixed names) come before the entry page, whose key takes any path.
        routes += set_actions_web.routes_for(set_name)
        routes.append(Route(path + "/{key:path}", _for_set(_entry, set_name), methods=["GET"]))
    return routes


ROUTES: list[BaseRoute] = _routes()
