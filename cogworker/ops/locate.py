"""Where one job is: running in a process, waiting in a queue, in the retry, scheduled or dead set,
and its status hash if it has one. What the Web UI's job page shows.

What is cheap comes first: the status hash and the live processes' work hashes (a few commands).
The sets and queues are then searched by short calls of one script (store/lua/locate.lua), each
reading at most SLICE elements from a cursor, because a script holds every other Redis client while
it runs: reading 100,000 dead entries in one call stalled every worker for 150 ms. A request makes at
most MAX_CALLS calls and stops past MAX_WALL_S; what is left is resumed from the returned Cursor
(the page's "Continue searching" link), so a page costs a bounded number of commands whatever the
sets hold. The script's hits are candidates (their text names the jid), kept only when the decoded
payload's jid is exactly this one.

The search stops at the first confirmed place: a jid is in one place at a time (every move between
the sets and the queues is one atomic script), so reading on would cost every other client Redis
time to confirm an absence. It isn't started at all when the job is running or its status says
"complete"; the caller can still ask for it (a Cursor from `start`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.ops import places, set_fanout
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.store import keys, shards
from cogworker.store.scripts import Scripts
from cogworker.store.shards import Partition

# Elements one script call reads at most: about 2.2 ms of Redis time with 300-byte payloads on the
# 2-core machine this was measured on (1.1 µs an element; 2,000 dead entries: median 2.2 ms, max
# 2.9 ms under a load average of 5), so no worker waits on the page much longer than a slow command.
SLICE = 2_000
# What visiting one key costs from a call's budget, in elements: its length and range calls (an
# empty queue measured 1.6 µs against 1.1 µs an element). Bounds a call over many empty queues.
KEY_COST = 2
# Calls one request makes at most, and the wall time past which it makes no more: 20,000
# elements, about 25 ms of Redis time, spread over calls other clients' commands run between.
MAX_CALLS = 10
MAX_WALL_S = 0.05
# Candidates one call returns at most: a payload naming the jid elsewhere (a child job's argument)
# is a candidate too, and a call stops after this many so its reply stays small.
HIT_CAP = 20

# A jid as cogworker makes them (24 hex digits), or one a caller chose: letters, digits and a few
# separators. Nothing a glob or JSON would treat specially, so the script's match is exact text.
JID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")

# The places searched: the three sets by name, each queue as "queue:<name>".
# Names only: the keys come from keys.job_sets() when used, so they carry the prefix in force.
# In the sharded layout each partition's: ops/places.py names them.
SET_PLACES = places.SET_PLACES
QUEUE_PLACE = places.QUEUE_PLACE
# Where a job with this status most likely is, searched first ("queue": the queue its status
# names). A scheduled job's status is "queued" too; a "working" job not running in a live process
# was put back in its queue (or is waiting for its retry) when its process died; a "retrying" job
# that came due was moved from the retry set to its queue.
LIKELY = {
    "queued": ("queue", "scheduled"),
    "working": ("queue", "retry"),
    "retrying": ("retry", "queue"),
    "limited": ("scheduled", "queue"),  # put back by a rate limiter (api/limit_jobs.py)
    "failed": ("dead",),
}


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a search goes on: a place, the offset in it (in reading order), and the places the
    search put first when it began (so a resumed search keeps its order if the status changes)."""

    place: str
    offset: int = 0
    first: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Queued:
    queue: str
    index: int  # from the left end (where jobs are pushed); the right end is popped next
    size: int
    payload: dict[str, Any]
    raw: str = ""  # the payload exactly as stored (what taking it off the queue matches)
    partition: Partition | None = None  # the queue partition whose list holds it (sharded layout)

    @property
    def ahead(self) -> int:
        """Jobs popped before this one."""
        return max(0, self.size - 1 - self.index)


@dataclass(frozen=True, slots=True)
class Running:
    identity: str
    hostname: str
    pid: int | None
    job: process_ops.RunningJob


@dataclass(slots=True)
class Search:
    """One request's stretch of the search, and where it stands overall."""

    order: list[str]  # every place, in search order
    sizes: dict[str, int]  # each place's length when this request began
    queued: list[Queued] = field(default_factory=list)
    entries: list[set_ops.Entry] = field(default_factory=list)  # retry, scheduled, dead
    wrong_type: list[str] = field(default_factory=list)  # keys skipped: not the type they should be
    next: Cursor | None = None  # where to go on; None: every place has been searched
    restarted: bool = False  # the cursor given was not valid, so the search began again
    calls: int = 0
    read: int = 0  # elements read by this request

    @property
    def found(self) -> bool:
        return bool(self.queued or self.entries)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    @property
    def searched(self) -> int:
        """Elements searched so far, this request and the ones before (by the cursor's place)."""
        if self.next is None:
            return self.total
        before = self.order[: self.order.index(self.next.place)]
        done = sum(self.sizes[p] for p in before) + min(self.next.offset, self.sizes[self.next.place])
        return min(done, self.total)

    @property
    def queue_count(self) -> int:
        return len({q for q in map(places.queue_of, self.order) if q is not None})


@dataclass(frozen=True, slots=True)
class Location:
    jid: str
    status: dict[str, str]  # the status hash (empty: not tracked, or expired)
    status_ttl_s: float | None  # seconds until the status hash expires
    running: list[Running]
    start: Cursor  # where a search from the beginning starts (the status's likely places first)
    search: Search | None  # None: not searched (see `skipped`)
    skipped: str | None = None  # why not: "running", "complete", or "not asked" (a live refresh)

    @property
    def found(self) -> bool:
        return bool(self.running or (self.search is not None and self.search.found))

    @property
    def payload(self) -> dict[str, Any] | None:
        """The job's payload from where it waits (a running job's is only summarised in Redis)."""
        if self.search is None:
            return None
        for entry in self.search.entries:
            if entry.payload is not None:
                return entry.payload
        return self.search.queued[0].payload if self.search.queued else None


def valid_jid(jid: str) -> bool:
    return JID.fullmatch(jid) is not None


def first_places(status: dict[str, str], queues: list[str], set_sizes: dict[str, int]) -> tuple[str, ...]:
    """The places to search before the queues, in order: those the status hash points at, then the
    three sets smallest first. With nothing to tell where a job is, a small set is as likely to
    hold it as a big one and costs less to rule out: a failing job's retry entry is found before
    a dead set of 100,000 is read, and a big set is read last whichever it is. Frozen into the
    cursor when a search begins, so a resumed search keeps its order when the sizes change."""
    places: list[str] = []
    for likely in LIKELY.get(status.get("status", ""), ()):
        queue = status.get("queue", "")
        place = QUEUE_PLACE + queue if likely == "queue" else likely
        if (likely != "queue" or queue in queues) and place not in places:
            places.append(place)
    by_size = sorted(SET_PLACES, key=lambda name: set_sizes.get(name, 0))  # stable: ties keep order
    return tuple(places + [name for name in by_size if name not in places])


def search_order(first: tuple[str, ...], queues: list[str]) -> list[str]:
    """Every place, `first` (those that exist, once each) leading; then the places it leaves out:
    the sets (retry, scheduled, dead) and the queues by name. Sets are read newest first, so a
    recent death is in the dead set's first slice however big it has grown."""
    everything = ["retry", "scheduled", "dead", *(QUEUE_PLACE + q for q in sorted(set(queues)))]
    lead = [p for n, p in enumerate(first) if p in everything and p not in first[:n]]
    return lead + [p for p in everything if p not in lead]


def place_key(place: str) -> str:
    return places.key(place)


def full_order(first: tuple[str, ...], queues: list[str], parts: list[Partition] | None) -> list[str]:
    """`search_order`, made of every partition's places in the sharded layout (`parts`)."""
    order = search_order(first, queues)
    return order if parts is None else places.sharded_order(order, parts)


def _partitions(client: redis.Redis, queues: list[str]) -> list[Partition] | None:
    """Every partition of `queues` and of the queues the home slot records (None: one-slot layout)."""
    if not shards.is_sharded():
        return None
    known = set_fanout.partitions(client)
    return sorted(set(known) | set(shards.every_partition(queues, {})))


def _confirm(search: Search, jid: str, place: str, position: str, raw: str, length: int) -> None:
    """Keep a candidate only if its payload's jid is exactly `jid`."""
    logical, partition = places.split(place)
    if logical in SET_PLACES:
        entry = set_ops.parse_entry(logical, raw, float(position), partition)
        # A set read in slices can show an element twice when entries arrive between calls.
        if entry.jid == jid and all(
            e.raw != raw or e.set != logical or e.partition != partition for e in search.entries
        ):
            search.entries.append(entry)
        return
    payload = codec.loads_dict(raw)
    if payload is not None and payload.get("jid") == jid:
        queue = logical[len(QUEUE_PLACE) :]
        search.queued.append(Queued(queue, int(position), length, payload, raw, partition))


def search(
    client: redis.Redis,
    scripts: Scripts,
    jid: str,
    cursor: Cursor,
    queues: list[str],
    max_calls: int = MAX_CALLS,
    max_wall_s: float = MAX_WALL_S,
    slice_size: int = SLICE,
    clock: Callable[[], float] = time.monotonic,
    parts: list[Partition] | None = None,
) -> Search:
    """Search on from `cursor` until a place is confirmed, every place is searched, `max_calls`
    script calls are made or `max_wall_s` has passed. `cursor.first` keeps only real places; a
    place that isn't one starts from the beginning (`locate` tells the caller so). In the sharded
    layout (`parts`: every partition) a call reads one partition's places, on its client."""
    logical = search_order(cursor.first, queues)
    order = full_order(cursor.first, queues, parts)
    if not order:  # the sharded layout with no partition known: nothing anywhere, every place searched
        return Search(order, {})
    cursor = Cursor(
        cursor.place, cursor.offset, tuple(p for p in dict.fromkeys(cursor.first) if p in logical)
    )
    if cursor.place not in order:
        cursor = Cursor(order[0], 0, cursor.first)
    found = Search(order, places.lengths(client, order))
    all_keys = [place_key(p) for p in order]
    kinds = "".join("z" if places.is_set(p) else "l" for p in order)
    index, offset = order.index(cursor.place), min(max(0, cursor.offset), found.sizes[cursor.place])
    deadline = clock() + max_wall_s
    while index < len(order) and found.calls < max(1, max_calls):
        # One call reads places of one slot: every place in the one-slot layout (one call as before),
        # one partition's in the sharded one. Indices in the call are relative to its first place.
        first, end = (0, len(order)) if parts is None else (index, places.run_end(order, index))
        holder = client if parts is None else set_fanout.client_of(client, places.split(order[first])[1])
        reply = scripts.run(
            "locate",
            all_keys[first:end],
            [jid, kinds[first:end], index - first + 1, offset, slice_size, HIT_CAP, KEY_COST],
            client=holder,
        )
        hits, notes, next_index, offset, read = cast(
            tuple[list[list[Any]], list[list[Any]], int, int, int], reply
        )
        found.calls, found.read = found.calls + 1, found.read + int(read)
        index = first + int(next_index) - 1
        for key_index, position, raw, length in hits:
            _confirm(found, jid, order[first + int(key_index) - 1], str(position), str(raw), int(length))
        named = [all_keys[first + int(n[0]) - 1] for n in notes]
        found.wrong_type.extend(k for k in named if k not in found.wrong_type)
        if found.found or clock() >= deadline:
            break
    found.next = Cursor(order[index], int(offset), cursor.first) if index < len(order) else None
    return found


def locate(
    client: redis.Redis,
    scripts: Scripts,
    jid: str,
    cursor: Cursor | None = None,
    searching: bool = True,
    now: float | None = None,
) -> Location:
    """Everything known of `jid`. The status hash and the running jobs always; the sets and queues
    from `cursor` when given, else from the start unless the job is running or complete (or
    `searching` is False: a live refresh shows only what is cheap)."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.status(jid))
    pipe.pttl(keys.status(jid))
    for name in SET_PLACES:
        pipe.zcard(keys.job_sets()[name])
    # A key of the wrong type answers an error: no status, an empty set (the search names it).
    raw_status, ttl_ms, *counts = pipe.execute(raise_on_error=False)
    status = {str(k): str(v) for k, v in raw_status.items()} if isinstance(raw_status, dict) else {}
    set_sizes = {name: n if isinstance(n, int) else 0 for name, n in zip(SET_PLACES, counts, strict=True)}
    live = process_ops.processes(client, now)
    running = [
        Running(p.identity, p.hostname, p.pid, job) for p in live for job in p.running if job.jid == jid
    ]
    queues = queue_ops.known_queues(client, {queue for p in live for queue in p.queues})
    parts = _partitions(client, queues)
    first = first_places(status, queues, set_sizes)
    # A sharded deployment that knows no partition yet (nothing pushed) has no place to search: the
    # cursor then names the first logical one, which any later search recognises.
    start = Cursor((full_order(first, queues, parts) or search_order(first, queues))[0], 0, first)
    skipped: str | None = None
    if not searching:
        skipped = "not asked"
    elif cursor is None and running:
        skipped = "running"
    elif cursor is None and status.get("status") == "complete":
        skipped = "complete"
    # A cursor naming no place there is (a queue since forgotten, a hand-edited link) restarts.
    restarted = cursor is not None and cursor.place not in full_order(cursor.first, queues, parts)
    found = None
    if not skipped:
        found = search(
            client, scripts, jid, start if cursor is None or restarted else cursor, queues, parts=parts
        )
        found.restarted = restarted
    return Location(
        jid=jid,
        status=status,
        status_ttl_s=ttl_ms / 1000 if isinstance(ttl_ms, int) and ttl_ms >= 0 else None,
        running=running,
        start=start,
        search=found,
        skipped=skipped,
    )
