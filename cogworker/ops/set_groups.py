"""The retry and dead sets grouped by job class and error class: "the 3 distinct failures, not
2,000 rows". Each group has its count, its newest error message and when its entries first and
last failed; the Web UI acts on a whole group through the bulk actions, with an exact filter
(sets.py `Filter(job_class=..., error_class=...)`).

Counting needs the whole set, so it reads the set in slices until it is done or its time budget
is spent, and says how far it got (`Grouping.scanned` of `total`): a partial count is labelled as
one, never shown as the whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import redis

from cogworker.ops.sets import BATCH, Entry, parse_entry, set_key

# Distinct groups kept: past that, entries of new groups are counted together (`Grouping.others`),
# so a set whose every error class differs can't grow the page without bound.
MAX_GROUPS = 500


@dataclass(slots=True)
class Group:
    job: str | None
    error_class: str | None
    count: int
    newest_message: str | None  # the message of the entry that failed last
    first_failed_at: float | None  # the earliest first failure among its entries
    last_failed_at: float | None  # the latest failure among its entries

    @property
    def actionable(self) -> bool:
        """Whether an exact filter can name it (an entry with no class or error class can't be)."""
        return self.job is not None and self.error_class is not None


@dataclass(frozen=True, slots=True)
class Grouping:
    groups: list[Group]  # most entries first, then the most recent failure first
    scanned: int  # entries counted
    total: int  # the set's size when counting started
    others: int  # entries past MAX_GROUPS distinct groups, counted but not grouped

    @property
    def complete(self) -> bool:
        return self.scanned >= self.total


def last_failure(entry: Entry) -> float | None:
    """When the entry last failed: its death, its latest retry's failure, or its first failure."""
    payload = entry.payload or {}
    times = [payload.get(name) for name in ("died_at", "retried_at", "failed_at")]
    found = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    return max(found) if found else None


def _add(group: Group, entry: Entry) -> None:
    group.count += 1
    first, last = entry.failed_at, last_failure(entry)
    if first is not None and (group.first_failed_at is None or first < group.first_failed_at):
        group.first_failed_at = first
    if last is not None and (group.last_failed_at is None or last >= group.last_failed_at):
        group.last_failed_at = last
        group.newest_message = entry.error_message
    elif group.newest_message is None:
        group.newest_message = entry.error_message


def groups(
    client: redis.Redis,
    set_name: str,
    budget_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> Grouping:
    """The set's entries grouped by (job class, error class), counting slice by slice until the set
    is done or `budget_s` has passed (checked between slices; the first is always read)."""
    key = set_key(set_name)
    total = client.zcard(key)
    found: dict[tuple[str | None, str | None], Group] = {}
    scanned = others = 0
    deadline = clock() + budget_s
    while scanned < total and (scanned == 0 or clock() < deadline):
        chunk = cast(
            list[tuple[str, float]], client.zrange(key, scanned, scanned + BATCH - 1, withscores=True)
        )
        if not chunk:
            break
        for raw, score in chunk:
            entry = parse_entry(set_name, raw, score)
            name = (entry.job, entry.error_class)
            group = found.get(name)
            if group is None:
                if len(found) >= MAX_GROUPS:
                    others += 1
                    continue
                group = found[name] = Group(entry.job, entry.error_class, 0, None, None, None)
            _add(group, entry)
        scanned += len(chunk)
    ordered = sorted(found.values(), key=lambda g: (-g.count, -(g.last_failed_at or 0.0)))
    return Grouping(ordered, min(scanned, total), total, others)
