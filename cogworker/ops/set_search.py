"""A filtered listing's search of the retry, scheduled or dead set: read in slices from a position
until a page of matches is found, the set is exhausted, or the time budget is spent, then say where
to go on. The Web UI's filters use it (web/sets.py); what a filter is, is in sets.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import redis

from cogworker.ops import set_merge
from cogworker.ops.sets import BATCH, Entry, Filter, parse_entry, set_key, sharded


@dataclass(frozen=True, slots=True)
class Search:
    found: list[Entry]  # the matches, in listing order
    start: int  # the first position examined
    end: int  # one past the last position examined: where the next search continues
    total: int  # the set's size when searched
    out_of_time: bool = False  # stopped by its time budget, with entries left and the page not full

    @property
    def finished(self) -> bool:
        return self.end >= self.total


def search(
    client: redis.Redis,
    set_name: str,
    match: Filter,
    start: int = 0,
    budget: int | None = None,
    limit: int = 25,
    desc: bool = True,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Search:
    """Up to `limit` matching entries from position `start`, read in slices until the page is full,
    the set is exhausted, `budget` entries were examined or `budget_s` seconds have passed (checked
    between slices; the first slice is always read, so every call moves on). A filter over a set
    of millions costs a bounded time per call, and the caller goes on from `end`."""
    if sharded():
        return _search_merged(client, set_name, match, max(0, start), budget, limit, desc, budget_s, clock)
    key = set_key(set_name)
    total = client.zcard(key)
    found: list[Entry] = []
    position = start = max(0, start)
    stop = total if budget is None else min(total, start + max(0, budget))
    deadline = None if budget_s is None else clock() + budget_s
    out_of_time = False
    while position < stop and len(found) < limit:
        if deadline is not None and position > start and clock() >= deadline:
            out_of_time = True
            break
        end = position + min(BATCH, stop - position) - 1
        chunk = cast(list[tuple[str, float]], client.zrange(key, position, end, desc=desc, withscores=True))
        if not chunk:
            break
        for raw, score in chunk:
            position += 1
            if not match.may_match(raw):
                continue
            entry = parse_entry(set_name, raw, score)
            if match(entry):
                found.append(entry)
                if len(found) >= limit:
                    break
    return Search(found, start, position, total, out_of_time)


def _search_merged(
    client: redis.Redis,
    set_name: str,
    match: Filter,
    start: int,
    budget: int | None,
    limit: int,
    desc: bool,
    budget_s: float | None,
    clock: Callable[[], float],
) -> Search:
    """`search` over every partition's set (the sharded layout), in the merged order: positions are
    the merged set's (set_merge.py), so `end` goes on as in the one-slot layout. The budget is
    checked every BATCH entries, as the one-slot search checks it between slices."""
    merged, total = set_merge.stream(client, set_name, start, desc, BATCH)
    found: list[Entry] = []
    position = start
    stop = total if budget is None else min(total, start + max(0, budget))
    deadline = None if budget_s is None else clock() + budget_s
    out_of_time = False
    for raw, score, partition in merged:
        if position >= stop or len(found) >= limit:
            break
        at_slice = position > start and (position - start) % BATCH == 0
        if deadline is not None and at_slice and clock() >= deadline:
            out_of_time = True
            break
        position += 1
        if not match.may_match(raw):
            continue
        entry = parse_entry(set_name, raw, score, partition)
        if match(entry):
            found.append(entry)
    return Search(found, start, position, total, out_of_time)
