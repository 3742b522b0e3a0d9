"""Where one job is: waiting in a queue, running in a process, in the retry, scheduled or dead set,
and its status hash if it has one. What the Web UI's job page shows.

The sets and queues are searched inside Redis by one script (store/lua/locate.lua), so finding a
job costs the same few commands with a hundred dead entries or a hundred thousand; the script's
hits are candidates (their text names the jid), kept only when the decoded payload's jid is exactly
this one. Queues are searched up to QUEUE_SCAN_CAP jobs each, from the end jobs are pushed to.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.store import keys
from cogworker.store.scripts import Scripts

# A jid as cogworker makes them (24 hex digits), or one a caller chose: letters, digits and a few
# separators. Nothing a glob or JSON would treat specially, so the script's match is exact text.
JID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
# How many jobs of each queue, and of all queues together, the script reads at most: Redis runs
# nothing else while it searches (about 1 µs per job), so the time is bounded whatever the queues
# hold. Queues beyond the budget are named on the page as not searched to their end.
QUEUE_SCAN_CAP = 100_000
QUEUE_SCAN_BUDGET = 200_000
# Hits kept per set or queue: a jid is unique, so more than one is already damaged data.
HIT_CAP = 20
SET_ORDER = ("retry", "scheduled", "dead")


@dataclass(frozen=True, slots=True)
class Queued:
    queue: str
    index: int  # from the left end (where jobs are pushed); the right end is popped next
    size: int
    payload: dict[str, Any]

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


@dataclass(frozen=True, slots=True)
class Location:
    jid: str
    status: dict[str, str]  # the status hash (empty: not tracked, or expired)
    status_ttl_s: float | None  # seconds until the status hash expires
    running: list[Running] = field(default_factory=list)
    queued: list[Queued] = field(default_factory=list)
    entries: list[set_ops.Entry] = field(default_factory=list)  # retry, scheduled, dead
    unsearched: dict[str, int] = field(default_factory=dict)  # queues longer than the cap: their size
    wrong_type: list[str] = field(default_factory=list)  # keys skipped: not the type they should be

    @property
    def found(self) -> bool:
        return bool(self.running or self.queued or self.entries)

    @property
    def payload(self) -> dict[str, Any] | None:
        """The job's payload from where it waits (a running job's is only summarised in Redis)."""
        for entry in self.entries:
            if entry.payload is not None:
                return entry.payload
        return self.queued[0].payload if self.queued else None


def valid_jid(jid: str) -> bool:
    return JID.fullmatch(jid) is not None


def _search(
    client: redis.Redis, scripts: Scripts, jid: str, queues: list[str]
) -> tuple[list[Queued], list[set_ops.Entry], dict[str, int], list[str]]:
    set_keys = [set_ops.SETS[name] for name in SET_ORDER]
    queue_keys = [keys.queue(name) for name in queues]
    reply = scripts.run(
        "locate", [*set_keys, *queue_keys], [jid, QUEUE_SCAN_CAP, HIT_CAP, QUEUE_SCAN_BUDGET], client=client
    )
    hits, notes = cast(tuple[list[list[Any]], list[list[Any]]], reply)
    queued: list[Queued] = []
    entries: dict[tuple[str, str], set_ops.Entry] = {}  # ZSCAN may return an element twice
    for index, position, raw, length in hits:
        slot = int(index) - 1
        if slot < len(SET_ORDER):
            entry = set_ops.parse_entry(SET_ORDER[slot], str(raw), float(position))
            if entry.jid == jid:
                entries[(entry.set, entry.raw)] = entry
            continue
        payload = codec.loads_dict(str(raw))
        if payload is not None and payload.get("jid") == jid:
            queued.append(Queued(queues[slot - len(SET_ORDER)], int(position), int(length), payload))
    unsearched: dict[str, int] = {}
    wrong_type: list[str] = []
    all_keys = [*set_keys, *queue_keys]
    for index, note, length in notes:
        slot = int(index) - 1
        if note == "truncated":
            unsearched[queues[slot - len(SET_ORDER)]] = int(length)
        else:
            wrong_type.append(all_keys[slot])
    found = sorted(entries.values(), key=lambda e: (SET_ORDER.index(e.set), e.score))
    return queued, found, unsearched, wrong_type


def locate(client: redis.Redis, scripts: Scripts, jid: str, now: float | None = None) -> Location:
    """Everything known of `jid`. A handful of commands (the processes' pipeline grows with the
    number of live processes, nothing grows with set or queue sizes)."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.status(jid))
    pipe.pttl(keys.status(jid))
    status, ttl_ms = pipe.execute()
    live = process_ops.processes(client, now)
    running = [
        Running(p.identity, p.hostname, p.pid, job) for p in live for job in p.running if job.jid == jid
    ]
    reading = {queue for p in live for queue in p.queues}
    queues = queue_ops.known_queues(client, reading)
    # The queue its status names first: within the budget, the likeliest place is searched for sure.
    likely = status.get("queue")
    if likely in queues:
        queues = [likely, *(q for q in queues if q != likely)]
    queued, entries, unsearched, wrong_type = _search(client, scripts, jid, queues)
    return Location(
        jid=jid,
        status={str(k): str(v) for k, v in cast(dict[str, str], status).items()},
        status_ttl_s=ttl_ms / 1000 if isinstance(ttl_ms, int) and ttl_ms >= 0 else None,
        running=running,
        queued=queued,
        entries=entries,
        unsearched=unsearched,
        wrong_type=wrong_type,
    )
