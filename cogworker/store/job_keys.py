"""The per-job keys a recovery script is given in KEYS (requeue.lua, reconcile.lua).

Putting a job back touches keys named by the job itself: its queue, its orphan counter, its periodic
entry's running lock. A script must not build those names from ARGV: Redis Cluster (and Dragonfly)
route a script by its declared keys and refuse the rest, and even a single Redis is only promised
correct for declared ones. So the caller reads the list first, works out from each payload the keys
the script will want, and passes them in KEYS, each named in ARGV (queue name, jid, entry name), so
the script looks keys up by name and never makes one.

The list may change between that read and the script (a late fetch reply landing on it), and Python
may read a payload differently from Lua's cjson (bytes that aren't UTF-8). Either way the script
leaves a job whose keys it wasn't given where it is, untouched, and names what it missed; the caller
declares those too and runs it again. Nothing is lost or moved twice: the script is still the one
atomic step that moves each job.

Each queue comes with its suspects list (the jobs of that queue to run alone, worker/recovering/recovery.py),
declared right after the queue's key. A payload without a jid has its orphan counter named by the
SHA-1 of its bytes (`keys.orphanings_raw`), so a jid-less payload that kills its process is counted
and ends in dead like any other.

In the sharded layout (store/shards.py) a script runs in one queue partition's slot and is given that
partition's keys only (`keys_and_args(partition)`): every queue name a payload on the partition's list
names is declared as the partition's own queue and suspects list, so a job goes back to the partition
it came from even when its payload names another queue (an old or hand-written entry: it is not lost
and not moved to a slot the script can't reach). Its orphan counters are the partition's. The periodic
running lock and the batch hash live in the home slot, out of the script's reach: a payload that
carries them is declared a stand-in key in the partition (`stand_in`), which nothing else reads: the
job is requeued like any other, and its home running lock or batch hold is neither retaken nor
released by the script. A requeued periodic run keeps the lock its slot's claim took (a day's TTL),
released from Python when the run ends or is buried (store/locks.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cogworker import codec
from cogworker.api import sidekiq_payload
from cogworker.store import keys, shards

# What a script names when it left a job for want of a key (its reply's `needs`, as kind, name pairs).
QUEUE, COUNTER, LOCK, DIGEST, BATCH, MEMBER = "queue", "counter", "lock", "digest", "batch", "member"
# Passes of read, declare, run: the second declares what the first missed, so a third is needed only
# when the list keeps changing underneath.
MAX_PASSES = 3


def digest(raw: str) -> str:
    """SHA-1 (hex) of a payload as Redis stores it, as the scripts' `redis.sha1hex` computes it. Text
    read with its invalid bytes escaped encodes back to those bytes."""
    return hashlib.sha1(raw.encode("utf-8", "surrogateescape"), usedforsecurity=False).hexdigest()


def read_job(raw: str, default_queue: str) -> tuple[str, str | None, str | None]:
    """(queue, jid, periodic entry holding a running lock) as the scripts' `read_job` reads them:
    the queue falls back to `default_queue`, the entry counts only for an until_executed run."""
    job = codec.loads_dict(raw) if codec.is_utf8(raw) else None
    if job is None:
        return default_queue, None, None
    queue = job.get("queue")
    jid = job.get("jid") if isinstance(job.get("jid"), str) else None
    pname = job.get("periodic_name")
    locked = job.get("periodic_until_executed") is True and isinstance(pname, str) and jid is not None
    return (queue if isinstance(queue, str) and queue else default_queue), jid, pname if locked else None


def member_batch(raw: str) -> str | None:
    """The bid of the batch a job (with a jid) is a member of, as requeue.lua's `member_batch` reads it."""
    job = codec.loads_dict(raw) if '"bid"' in raw and codec.is_utf8(raw) else None
    if job is None or not isinstance(job.get("jid"), str) or not isinstance(job.get("bid"), str):
        return None
    if keys.SIDEKIQ and not sidekiq_payload.own_batch(job):  # a foreign (Sidekiq Pro) bid is opaque
        return None
    return str(job["bid"])


@dataclass
class Declared:
    """Queue names, jids, periodic entry names and jid-less payloads' digests whose keys a script
    is given."""

    queues: set[str] = field(default_factory=set)
    jids: set[str] = field(default_factory=set)
    entries: set[str] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)
    bids: set[str] = field(default_factory=set)  # requeue.lua only (`batch_keys_and_args`)
    # requeue.lua only (`member_keys_and_args`): jid -> payload of each batch member or callback
    members: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_jobs(self, raws: Iterable[str], default_queue: str) -> None:
        """Every orphan counter is declared, counted or not: a job with orphanings goes back to its
        suspects list even when this requeue counts none (a clean stop's)."""
        self.queues.add(default_queue)
        for raw in raws:
            queue, jid, entry = read_job(raw, default_queue)
            self.queues.add(queue)
            if jid is not None:
                self.jids.add(jid)
            else:
                self.digests.add(digest(raw))
            if entry is not None:
                self.entries.add(entry)
            bid = member_batch(raw)
            if bid is not None:
                self.bids.add(bid)
            member = codec.loads_dict(raw) if jid is not None and codec.is_utf8(raw) else None
            if jid is not None and member is not None and sidekiq_payload.batch_member(member):
                self.members[jid] = member

    def add_needs(self, pairs: Sequence[Any]) -> None:
        """What a script said it missed: (kind, name) pairs flattened."""
        for kind, name in zip(pairs[::2], pairs[1::2], strict=True):
            named = {
                QUEUE: self.queues,
                COUNTER: self.jids,
                LOCK: self.entries,
                DIGEST: self.digests,
                BATCH: self.bids,
                # A member that came after the read: the next pass reads it with the list.
                MEMBER: set(),
            }
            named[str(kind)].add(str(name))

    def keys_and_args(self, partition: shards.Partition | None = None) -> tuple[list[str], list[str | int]]:
        """The keys to append to KEYS (each queue's key followed by its suspects list's), and ARGV's
        tail: the four counts, then every name in the keys' order. With a `partition` (the sharded
        layout), that partition's keys only (the module's docstring says why)."""
        queues, jids, entries = sorted(self.queues), sorted(self.jids), sorted(self.entries)
        digests = sorted(self.digests)
        if partition is None:
            declared = [
                *(key for q in queues for key in (keys.queue(q), keys.suspects(q))),
                *(keys.orphanings(j) for j in jids),
                *(keys.periodic_running(e) for e in entries),
                *(keys.orphanings_raw(d) for d in digests),
            ]
        else:
            p = partition
            declared = [
                *(key for _ in queues for key in (shards.queue_key(p), shards.suspects(p))),
                *(shards.orphanings(p, j) for j in jids),
                *(stand_in(p, "periodic-running", e) for e in entries),
                *(shards.orphanings_raw(p, d) for d in digests),
            ]
        counts: list[str | int] = [len(queues), len(jids), len(entries), len(digests)]
        return declared, [*counts, *queues, *jids, *entries, *digests]

    def batch_keys_and_args(
        self, partition: shards.Partition | None = None
    ) -> tuple[list[str], list[str | int]]:
        """requeue.lua's tail after `keys_and_args`: the batch hashes, and ARGV's count and bids."""
        bids = sorted(self.bids)
        if partition is None:
            return [keys.batch(b) for b in bids], [len(bids), *bids]
        return [stand_in(partition, "batch", b) for b in bids], [len(bids), *bids]

    def member_keys_and_args(
        self, partition: shards.Partition | None, ttl_s: float
    ) -> tuple[list[str], list[str | int]]:
        """requeue.lua's tail after `batch_keys_and_args`. One slot: each member's batch layout, to
        count it failed if the script finds it cancelled. Sharded: the partition's outbox, where the
        script writes a requeued member's hold release (`hold_ids`)."""
        if partition is not None:
            return [shards.outbox(partition)], ["1", 0]
        from cogworker.store import batch_scripts  # only a list holding members needs the layouts

        script_keys: list[str] = []
        args: list[str | int] = ["", len(self.members)]
        for jid, job in sorted(self.members.items()):
            member_keys, member_args = batch_scripts.layout(job, "failed", CANCELLED_ERROR, ttl_s)
            script_keys += member_keys
            args += [jid, len(member_keys), len(member_args), *member_args]
        return script_keys, args

    def hold_ids(self) -> list[str]:
        """The ids of the `batch_hold` entries requeue.lua may have written (sharded layout)."""
        members = sorted(self.members.items())
        return [f"hold:{job['bid']}:{jid}" for jid, job in members if isinstance(job.get("bid"), str)]


# The error a member cancelled while its process died is counted with (batch_settle.py's wording).
CANCELLED_ERROR = "ended without running (cancelled)"


def stand_in(partition: shards.Partition, kind: str, name: str) -> str:
    """A key in `partition`'s slot standing for a home key a recovery script can't reach (a periodic
    running lock, a batch hash) on a stray payload in the sharded layout: nothing else reads it. A
    running lock's stand-in may be set (with the lock's TTL); a batch's is only read, and is never
    there, so no hold is released."""
    return f"{partition.prefix}unsharded:{kind}:{name}"
