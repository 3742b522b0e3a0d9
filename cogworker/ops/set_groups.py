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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.api import timestamps
from cogworker.ops import set_fanout, set_merge
from cogworker.ops.sets import BATCH, set_key, sharded
from cogworker.store.shards import Partition

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


def _time(payload: dict[str, Any], name: str) -> float | None:
    return timestamps.field_s(payload, name)  # seconds, or Sidekiq 8's milliseconds


def _text(payload: dict[str, Any], name: str) -> str | None:
    value = payload.get(name)
    return value if isinstance(value, str) and value else None


def last_failure(payload: dict[str, Any]) -> float | None:
    """When the entry last failed: its death, its latest retry's failure, or its first failure."""
    found = [t for t in (_time(payload, n) for n in ("died_at", "retried_at", "failed_at")) if t is not None]
    return max(found) if found else None


def _add(group: Group, payload: dict[str, Any]) -> None:
    group.count += 1
    first, last = _time(payload, "failed_at"), last_failure(payload)
    if first is not None and (group.first_failed_at is None or first < group.first_failed_at):
        group.first_failed_at = first
    if last is not None and (group.last_failed_at is None or last >= group.last_failed_at):
        group.last_failed_at = last
        group.newest_message = _text(payload, "error_message")
    elif group.newest_message is None:
        group.newest_message = _text(payload, "error_message")


def groups(
    client: redis.Redis,
    set_name: str,
    budget_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> Grouping:
    """The set's entries grouped by (job class, error class), counting slice by slice until the set
    is done or `budget_s` has passed (checked between slices; the first is always read)."""
    found: dict[tuple[str | None, str | None], Group] = {}
    scanned = others = 0
    deadline = clock() + budget_s
    slices, total = _slices(client, set_name)
    for chunk in slices:
        if scanned > 0 and clock() >= deadline:
            break
        for raw in chunk:
            payload = codec.loads_dict(raw) or {}
            name = (_text(payload, "class"), _text(payload, "error_class"))
            group = found.get(name)
            if group is None:
                if len(found) >= MAX_GROUPS:
                    others += 1
                    continue
                group = found[name] = Group(name[0], name[1], 0, None, None, None)
            _add(group, payload)
        scanned += len(chunk)
    ordered = sorted(found.values(), key=lambda g: (-g.count, -(g.last_failed_at or 0.0)))
    return Grouping(ordered, min(scanned, total), total, others)


def _slices(client: redis.Redis, set_name: str) -> tuple[Iterator[list[str]], int]:
    """The set's entries a slice at a time, in no particular order, and its size when counting
    started: the one-slot set's, or every partition's one after the other (the sharded layout)."""
    places: list[Partition | None] = [None]
    if sharded():
        places = list(set_fanout.partitions(client))
        sizes = set_merge.sizes(client, [p for p in places if p is not None], set_name)
    else:
        sizes = [client.zcard(set_key(set_name))]

    def read() -> Iterator[list[str]]:
        for partition, size in zip(places, sizes, strict=True):
            holder, key, done = set_fanout.client_of(client, partition), set_key(set_name, partition), 0
            while done < size:
                # Decoded without building an Entry: counting a large set is mostly this loop.
                chunk = cast(list[str], holder.zrange(key, done, done + BATCH - 1))
                if not chunk:
                    break
                done += len(chunk)
                yield chunk

    return read(), sum(sizes)
