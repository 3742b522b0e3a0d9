"""Steps that span slots in the sharded layout, each made exactly once: the outbox.

A script runs in one slot. In the sharded layout a job's ack runs in its queue partition's slot, while
a feature's state (a batch, a chain, a periodic entry) lives in the home slot, and a job the feature
pushes goes to another partition. So a step that must follow a job's move is written down in the
same script as the move, in that slot, as an **entry** of the slot's outbox (a hash, entry id -> JSON),
and carried out afterwards by a **mover**:

1. `apply`: the entry's feature step in the home slot, by the function its kind names (`KINDS`). It
   must be idempotent: run twice, the second run changes nothing (an SREM of a jid from a batch's
   pending set, a HSETNX, a step index that only grows).
2. `push`: the jobs the entry carries, each to the queue partition named in the entry, by
   push_batch.lua with the jobs' `pushed:<jid>` markers living OUTBOX_MARK_TTL_S: a marker already
   there (any earlier move of this entry) skips the job, so a push repeated after a crash or a lost
   reply makes no second copy.
3. `HDEL` of the entry, last: until then any mover may carry it out again, with the same result.

The process that wrote the entry moves it at once (one round trip per step). A mover that dies
before the HDEL (SIGKILL, a lost reply it could not repeat) leaves the entry; every worker's poller
sweeps every outbox (`sweep`) and moves the entries older than OUTBOX_LEASE_S. Several movers may move
one entry at once: each step is idempotent, so the entry's effects happen once.

**The bound.** A marker lives OUTBOX_MARK_TTL_S. A mover that pushed and died before the HDEL leaves a
marker that expires that long after; a sweep later than that can't tell the push happened. An entry
older than that is still moved (at least once beats never) and logged as `outbox_entry_stale`: its
jobs may be pushed twice. That takes a crash between two commands and no process polling for ten
minutes after it.

Entry JSON (written by Python, or by a script with cjson): `kind`, `at` (epoch seconds, when it was
written), `push` (a list of [partition index, payload text], the payload's `queue` naming the queue;
cjson writes an empty list as `{}`, read as empty), and the kind's own fields.
"""

from __future__ import annotations

import importlib
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.settings_fields import SettingsFields
from cogworker.store import fanout, keys, shards
from cogworker.store.shard_clients import SlotClients

log = structlog.get_logger("cogworker.outbox")

# How old an entry is before a sweep moves it: its writer moves it within milliseconds, so a sweep
# finds only the entries of a writer that died or lost its connection.
OUTBOX_LEASE_S = 10.0
# How long a moved job's `pushed:<jid>` marker lives: the window in which a second move of an entry
# knows its push happened. Ten minutes of markers at 1,000 outbox pushes a second is about 60 MB.
OUTBOX_MARK_TTL_S = 600
# Entries one sweep reads per outbox per HSCAN call.
SCAN_COUNT = 100

# Each kind's apply step, "module:function", imported on first use: named here, not by the feature's
# module, so a sweeping process that never imported the feature still knows every kind. A kind this
# version doesn't know (a newer version's) is left for a process that does (logged once per process).
KINDS: dict[str, str] = {
    "chain_step": "cogworker.worker.settling.chain_sharded:apply",  # a chain step's result and progress
    "chain_group": "cogworker.api.chain_group_outbox:apply",  # a chain's first step, a group: its batch
    "periodic_push": "cogworker.api.periodic_outbox:apply",
    "batch_end": "cogworker.store.batch_ends:apply_end",  # a batch member's end, counted in its batch
    "batch_cb": "cogworker.store.batch_ends:apply_callback",  # a decided batch's callback, pushed
    "batch_hold": "cogworker.store.batch_ends:apply_hold",  # a requeued member's run hold released
}

Apply = Callable[["Mover", "Entry"], None]


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    kind: str
    at: float
    fields: dict[str, Any]  # the whole decoded entry, the kind's own fields among them
    pushes: tuple[tuple[shards.Partition, dict[str, Any]], ...] = field(default=())


def key(where: shards.Partition | None) -> str:
    """The outbox hash of a partition's slot, or of the home slot (None)."""
    return shards.outbox(where) if where is not None else keys.OUTBOX


def encode(kind: str, pushes: Iterable[tuple[shards.Partition, str]] = (), **fields: Any) -> str:
    """An entry's JSON, for a script to write with the move it follows. `pushes`: (partition, payload
    text) of each job the entry pushes, the partition chosen now (api/push_shards.partition_of), so
    every mover sends a job to the same partition whatever its own partition count."""
    body = {"kind": kind, "at": time.time(), "push": [[p.index, text] for p, text in pushes], **fields}
    return json.dumps(body, separators=(",", ":"))


def decode(entry_id: str, raw: str | bytes) -> Entry:
    """An entry read from an outbox. ValueError when it isn't one (the sweep quarantines nothing: it
    logs the entry and leaves it)."""
    body = json.loads(raw)
    if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
        raise ValueError(f"outbox entry {entry_id!r} is not an object with a kind")
    pushes = []
    for item in body.get("push") or []:  # {} from cjson: empty
        index, text = item
        payload = codec.loads(text)
        pushes.append((shards.Partition(str(payload["queue"]), int(index)), payload))
    return Entry(entry_id, body["kind"], float(body.get("at", 0)), body, tuple(pushes))


def register(kind: str, target: str) -> None:
    """Name the apply step of `kind` ("module:function") beside KINDS (a test's own kind)."""
    KINDS[kind] = target


_resolved: dict[str, Apply] = {}
# (deployment prefix, queue, count) this process recorded before pushing an entry's job there.
_recorded: set[tuple[str, str, int]] = set()
_unknown_logged: set[str] = set()


def _apply_of(kind: str) -> Apply | None:
    found = _resolved.get(kind)
    if found is None and kind in KINDS:
        module, name = KINDS[kind].split(":")
        found = _resolved[kind] = getattr(importlib.import_module(module), name)
    return found


class Mover:
    """Carries out outbox entries: the home client, every partition's, and the settings a push needs."""

    def __init__(self, clients: SlotClients, settings: SettingsFields) -> None:
        self.clients = clients
        self.home = clients.home
        self.settings = settings

    def client(self, where: shards.Partition | None) -> redis.Redis:
        return self.home if where is None else self.clients.of(where)

    def move(self, where: shards.Partition | None, entry: Entry) -> bool:
        """Carry out `entry` of `where`'s outbox: apply, push, HDEL. False when its kind is unknown
        here (left for another process). Redis errors are raised: the entry stays for a sweep."""
        apply = _apply_of(entry.kind)
        if apply is None:
            if entry.kind not in _unknown_logged:
                _unknown_logged.add(entry.kind)
                log.warning("outbox_kind_unknown", kind=entry.kind, entry=entry.id, outbox=key(where))
            return False
        apply(self, entry)
        self.push(entry)
        self.client(where).hdel(key(where), entry.id)
        return True

    def move_ids(self, where: shards.Partition | None, ids: list[str]) -> int:
        """Read and move the entries `ids` of `where`'s outbox (a script answered with the ids it wrote).
        Entries already gone were moved by someone else. Returns how many were moved here."""
        if not ids:
            return 0
        raws = self.client(where).hmget(key(where), ids)
        moved = 0
        for entry_id, raw in zip(ids, raws, strict=True):
            if raw is not None and self.move(where, decode(entry_id, raw)):
                moved += 1
        return moved

    def push(self, entry: Entry) -> None:
        """Push the entry's jobs, partition by partition; a job whose marker is there is not pushed
        again. The attempt's token is new each time, so a second move finds the first one's marker."""
        from cogworker.api import push_write  # the job API's write, imported by a mover only

        by_partition: dict[shards.Partition, list[dict[str, Any]]] = {}
        for partition, payload in entry.pushes:
            by_partition.setdefault(partition, []).append(dict(payload))
        for partition, jobs in sorted(by_partition.items()):
            self._record(partition)
            push_write.write(
                self.clients.of(partition),
                self.settings,
                jobs,
                f"outbox:{uuid.uuid4().hex}",
                partition if shards.is_sharded() else None,
                home=self.home,
                mark_ttl_s=OUTBOX_MARK_TTL_S,
            )

    def _record(self, partition: shards.Partition) -> None:
        """Readers must cover the partition pushed to: its queue's recorded count raised to include it
        (once per process and count; the writer's count may be above this process's)."""
        if not shards.is_sharded():
            return
        seen = (shards.deployment_prefix(), partition.queue, partition.index + 1)
        if seen not in _recorded:
            fanout.record(self.home, partition.queue, partition.index + 1)
            _recorded.add(seen)

    def sweep(self, where: shards.Partition | None, now: float | None = None) -> int:
        """Move the entries of `where`'s outbox older than OUTBOX_LEASE_S; how many were moved. An entry
        that fails is logged and left for the next sweep; the others are still moved."""
        now = time.time() if now is None else now
        client = self.client(where)
        outbox = key(where)
        moved = 0
        for entry_id, raw in client.hscan_iter(outbox, count=SCAN_COUNT):
            name = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            try:
                entry = decode(name, raw)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("outbox_entry_unreadable", outbox=outbox, entry=name, error=str(exc))
                continue
            if now - entry.at < OUTBOX_LEASE_S:
                continue
            if now - entry.at > OUTBOX_MARK_TTL_S:
                log.error(
                    "outbox_entry_stale",
                    outbox=outbox,
                    entry=name,
                    kind=entry.kind,
                    age_s=round(now - entry.at),
                    note="older than its push markers: a job it pushes may be pushed a second time",
                )
            try:
                moved += self.move(where, entry)
            except redis.RedisError as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.warning("outbox_move_failed", outbox=outbox, entry=name, error=error)
        return moved
