"""Jobs whose arguments or class hold a piece of text, across the queues and the retry, scheduled and
dead sets: what the Web UI's header search box finds when given something other than a jid.

A match is a substring of the job's class, or of the JSON of its args and kwargs (as the set
filters read them, ops/sets.Filter). Every place is read in slices with the readers its own pages
use (ops/sets.page, ops/queues.jobs_page), in the order ops/locate searches for a jid, and a
request stops once its time budget is spent or its page of matches is full: it returns a Cursor
(place, offset) to go on from, so searching a million dead entries is a series of short requests,
never one long one. Plain reads between which other clients' commands run: no script holds Redis.

Places move while they are read: an entry filed between two requests shifts the rest along, so a
match may show twice across "continue" links, or one may be passed over; a search started again
reads the places as they are then.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.ops import locate, places, set_fanout, set_merge
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.store import shards

# Elements one read takes: a ZRANGE or LRANGE of 500 payloads is well under a millisecond of Redis.
SLICE = 500
# Within the Web UI's page target (p99 100 ms) with one slice's overrun (the budget is checked
# between slices) and the page's drawing: 300 ms made every search that matched little a 320 ms
# page (`make bench --only webscale`); a longer search is a series of short requests ("continue").
BUDGET_S = 0.05
LIMIT = 50
MAX_QUERY = 200


@dataclass(frozen=True, slots=True)
class Match:
    place: str  # "retry", "scheduled", "dead" or "queue:<name>"
    jid: str | None
    job: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    entry: set_ops.Entry | None = None  # a set's entry (its page is named by entry.key)
    index: int | None = None  # a queued job's index from the newest end

    @property
    def queue(self) -> str | None:
        queue = places.queue_of(self.place)
        if queue is not None:
            return queue
        return self.entry.queue if self.entry is not None else None


@dataclass(slots=True)
class Found:
    text: str
    order: list[str]  # every place, in search order
    matches: list[Match] = field(default_factory=list)
    next: locate.Cursor | None = None  # where to go on; None: every place has been read
    out_of_time: bool = False  # the budget ran out (else: the page filled, or all was read)
    restarted: bool = False  # the cursor named no place there is, so the search began again
    read: int = 0  # elements read by this request

    @property
    def full(self) -> bool:
        return self.next is not None and not self.out_of_time


def holds(text: str, job: str | None, args: Any, kwargs: Any) -> bool:
    """Whether `text` is in the job's class or in its arguments' JSON."""
    if text in (job or ""):
        return True
    return text in f"{codec.dumps_lenient(args)[0]} {codec.dumps_lenient(kwargs)[0]}"


def _read_set(client: redis.Redis, place: str, offset: int, count: int) -> list[Match]:
    return [
        Match(place, e.jid, e.job, e.args, e.kwargs, entry=e)
        for e in set_ops.page(client, place, offset, count, desc=True)
    ]


class _MergedSets:
    """The sharded layout's set reader: every partition's set read on in the merged order
    (ops/set_merge.py), the position found once per place and request rather than once a slice."""

    def __init__(self) -> None:
        self._place: str | None = None
        self._stream: Iterator[set_merge.Item] = iter(())

    def __call__(self, client: redis.Redis, place: str, offset: int, count: int) -> list[Match]:
        if place != self._place:
            self._place, self._stream = place, set_merge.stream(client, place, offset, True, count)[0]
        found = []
        for raw, score, partition in itertools.islice(self._stream, count):
            e = set_ops.parse_entry(place, raw, score, partition)
            found.append(Match(place, e.jid, e.job, e.args, e.kwargs, entry=e))
        return found


def _read_queue(client: redis.Redis, place: str, offset: int, count: int) -> list[Match]:
    logical, partition = places.split(place)
    if partition is not None:
        return _read_queue_partition(client, place, partition, offset, count)
    found = []
    for queued in queue_ops.jobs_page(client, logical[len(locate.QUEUE_PLACE) :], offset, count):
        kwargs = (codec.loads_dict(queued.raw) or {}).get("kwargs")
        found.append(
            Match(
                place,
                queued.jid,
                queued.job,
                queued.args,
                kwargs if isinstance(kwargs, dict) else {},
                index=queued.index,
            )
        )
    return found


def _read_queue_partition(
    client: redis.Redis, place: str, partition: shards.Partition, offset: int, count: int
) -> list[Match]:
    """A queue partition's list (the sharded layout), on its own client, newest first as
    `queues.jobs_page` reads a one-slot queue."""
    holder = set_fanout.client_of(client, partition)
    raws = cast(list[str], holder.lrange(shards.queue_key(partition), offset, offset + count - 1))
    found = []
    for n, raw in enumerate(raws):
        job = codec.loads_dict(str(raw)) or {}
        jid, name, args, kwargs = job.get("jid"), job.get("class"), job.get("args"), job.get("kwargs")
        found.append(
            Match(
                place,
                jid if isinstance(jid, str) else None,
                name if isinstance(name, str) else None,
                args if isinstance(args, list) else [],
                kwargs if isinstance(kwargs, dict) else {},
                index=offset + n,
            )
        )
    return found


def _order(client: redis.Redis) -> list[str]:
    """The places searched: the sets (each read as one, every partition's merged, in the sharded
    layout) and the queues (each partition's list in the sharded layout: ops/places.py)."""
    queues = queue_ops.known_queues(client)
    order = locate.search_order((), queues)
    if not set_ops.sharded():
        return order
    parts = sorted(set(set_fanout.partitions(client)) | set(shards.every_partition(queues, {})))
    queue_places = [places.of_partition(locate.QUEUE_PLACE + p.queue, p) for p in parts]
    return [p for p in order if p in locate.SET_PLACES] + queue_places


def search(
    client: redis.Redis,
    text: str,
    cursor: locate.Cursor | None = None,
    budget_s: float = BUDGET_S,
    limit: int = LIMIT,
    slice_size: int = SLICE,
    clock: Callable[[], float] = time.monotonic,
) -> Found:
    """Matches for `text` from `cursor` (None: the start) until `limit` are found, every place is
    read or `budget_s` has passed (at least one element is read per request, so each moves on)."""
    order = _order(client)
    found = Found(text, order)
    if cursor is not None and cursor.place not in order:
        found.restarted, cursor = True, None
    index = order.index(cursor.place) if cursor is not None else 0
    offset = max(0, cursor.offset) if cursor is not None else 0
    deadline = clock() + budget_s
    read_set = _MergedSets() if set_ops.sharded() else _read_set
    while index < len(order):
        place = order[index]
        reader = read_set if place in locate.SET_PLACES else _read_queue
        try:
            chunk = reader(client, place, offset, slice_size)
        except redis.ResponseError:
            chunk = []  # a key of the wrong type: nothing to match (`cogworker doctor` names it)
        for position, item in enumerate(chunk):
            if holds(text, item.job, item.args, item.kwargs):
                found.matches.append(item)
                if len(found.matches) >= limit:
                    chunk = chunk[: position + 1]
                    break
        found.read += len(chunk)
        offset += len(chunk)
        if len(chunk) < slice_size and len(found.matches) < limit:
            index, offset = index + 1, 0
        if len(found.matches) >= limit:
            break
        # Empty places cost a round trip each and no parsing: the budget counts once something is read.
        if found.read and clock() >= deadline:
            found.out_of_time = index < len(order)
            break
    found.next = locate.Cursor(order[index], offset) if index < len(order) else None
    return found
