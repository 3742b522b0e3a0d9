"""Server-side pages: a page number (or a scan position) from the query string, and the links.

A page reads one slice of a list or sorted set (LRANGE/ZRANGE start..end), so it costs the same at
a hundred entries or a hundred thousand; no page reads a whole set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from cogworker.web.render import path_to

PER_PAGE = 25
MAX_PAGE = 1_000_000


@dataclass(frozen=True, slots=True)
class Pager:
    label: str
    first_url: str | None = None
    previous_url: str | None = None
    next_url: str | None = None
    last_url: str | None = None


def page_number(request: Request) -> int:
    """`?page=N`, 1-based; anything that isn't a page number is page 1."""
    try:
        number = int(request.query_params.get("page", "1"))
    except ValueError:
        return 1
    return min(MAX_PAGE, max(1, number))


def start_of(page: int, per_page: int = PER_PAGE) -> int:
    return (page - 1) * per_page


def numbered(
    request: Request, path: str, page: int, total: int, per_page: int = PER_PAGE, **query: Any
) -> Pager:
    """Links for page `page` of `total` items (query: the filters to keep on every link)."""
    pages = max(1, math.ceil(total / per_page))
    first = path_to(request, path, **query) if page > 2 else None
    previous = path_to(request, path, **query, page=page - 1 if page > 2 else None) if page > 1 else None
    following = path_to(request, path, **query, page=page + 1) if page < pages else None
    last = path_to(request, path, **query, page=pages) if page < pages else None
    return Pager(f"page {page:,} of {pages:,}", first, previous, following, last)
