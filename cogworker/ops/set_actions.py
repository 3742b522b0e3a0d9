"""Acting on entries of the retry, scheduled and dead sets: retrying now, killing and deleting, one
entry or every entry a filter matches (listing and finding them is in sets.py).

Every change takes an entry out by its exact text (ZREM), in the same atomic step as anything it
writes, and only after that write: two operators (or an operator and a poller) acting on one entry
at once can't both win, so a job is never enqueued twice by a "retry now" nor filed twice in dead by
a "kill", and a key of the wrong type stops the step before anything changed.

In the sharded layout an entry lies in one queue partition's set (`Entry.partition`), and every
action runs there, on that partition's client, with that partition's keys: "retry now" pushes onto
the partition's own queue, "kill" files in its own dead set, so each step stays atomic in one slot.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import codec
from cogworker.api import death
from cogworker.api.job_status import record_failed
from cogworker.ops import NotFound, OpsError, set_fanout, set_places
from cogworker.ops.sets import BATCH, UNREADABLE, Entry, Filter, entries, get, set_key, sharded
from cogworker.settings import Settings
from cogworker.store import key_guard, keys, shards
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts
from cogworker.store.shards import Partition

# An entry replaced while we act on it (the poison-pill swap in worker/recovering/recovery.py) is
# looked up again.
ATTEMPTS = 3


KILLABLE = ("retry", "scheduled")
KILLED = "cogworker.Killed"


class NotRetryable(OpsError):
    """The entry can't be put back on a queue (its payload is unreadable, or names no queue)."""


class WrongTypeKey(OpsError):
    """A key the action writes has the wrong type: nothing changed (the workers' guard is asked)."""


def _check_reply(client: redis.Redis, reply: Any, entry: Entry | None = None) -> Any:
    """A script's reply, or WrongTypeKey naming the key when it reported one (its type read where
    it lives: `entry`'s partition in the sharded layout; the guard asked in the home slot)."""
    key = key_guard.script_wrong_type(reply)
    if key is not None:
        raise WrongTypeKey(str(key_guard.wrong_type_error(client, str(key))))
    return reply


def requeued_payload(entry: Entry, now: float) -> dict[str, Any]:
    """The payload to push for a retry now, as Sidekiq's Web UI does it: its error fields and
    retry_count stay (a failure after this one counts from there), `retried_at` says a human sent
    it back, and it is stamped enqueued now."""
    if not entry.readable or entry.payload is None or entry.queue is None:
        if entry.job == UNREADABLE or entry.payload is None:
            why = "its payload is unreadable (the raw text is kept under `raw`: see `show`)"
        else:
            why = "its payload names no job class or no queue"
        raise NotRetryable(f"job {entry.ref} in the {entry.set} set can't be retried: {why}")
    job = dict(entry.payload)
    job.pop("at", None)
    if entry.set != "scheduled":
        job["retried_at"] = now
    job["enqueued_at"] = now
    return job


def requeued_text(entry: Entry, now: float) -> str:
    """`requeued_payload` as JSON. NotRetryable when JSON can't hold it (nested past the 254 levels
    orjson writes, though it reads 1,024): `show` and `delete` still work on it."""
    job = requeued_payload(entry, now)
    try:
        return codec.dumps(job)
    except codec.EncodeError as exc:
        raise NotRetryable(
            f"job {entry.ref} in the {entry.set} set can't be retried: its payload can't be written "
            f"back as JSON ({exc})"
        ) from exc


def _graduate_keys(entry: Entry) -> list[str]:
    """graduate.lua's keys for putting `entry` back on its queue: in the sharded layout the queue of
    the partition whose set holds it, so the move stays in that partition's slot."""
    assert entry.queue is not None
    p = entry.partition
    if p is None:
        return [set_key(entry.set), keys.queue(entry.queue), keys.QUEUES, keys.WAKE_CHANNEL]
    if entry.queue != p.queue:
        # Its own queue's partitions are other slots: the move could not be one step there.
        raise NotRetryable(
            f"job {entry.ref} in the {entry.set} set of queue partition {p} names queue {entry.queue!r}: "
            "in the sharded layout it can only go back to the queue whose partition holds it "
            "(push it again, or delete it)"
        )
    return [set_key(entry.set, p), shards.queue_key(p), shards.registry(p), shards.wake_channel(p)]


def retry_now(
    client: redis.Redis, scripts: Scripts, set_name: str, ref: str, score: float | None = None
) -> Entry:
    """Move the entry to the queue its payload names, now, in one script (graduate.lua, the poller's
    own: pushed only if the entry is still there, then taken out). Of two operators retrying one entry
    at once exactly one succeeds; the other gets NotFound. Returns the entry moved. `score` (the
    Web UI's entry key has it) finds the entry without a scan."""
    for _ in range(ATTEMPTS):
        entry = get(client, set_name, ref, score)
        text = requeued_text(entry, time.time())
        assert entry.queue is not None
        moved = scripts.run(
            "graduate",
            _graduate_keys(entry),
            [entry.raw, text, entry.queue],
            client=set_places.holder(client, entry),
        )
        if _check_reply(client, moved, entry):
            return entry
    raise NotFound(f"job {ref} in the {set_name} set changed while being retried: try again")


def delete(client: redis.Redis, set_name: str, ref: str, score: float | None = None) -> Entry:
    """Remove the entry; returns it. NotFound if it is gone (someone else acted on it first)."""
    for _ in range(ATTEMPTS):
        entry = get(client, set_name, ref, score)
        if set_places.holder(client, entry).zrem(set_key(set_name, entry.partition), entry.raw):
            return entry
    raise NotFound(f"job {ref} in the {set_name} set changed while being deleted: try again")


@dataclass(frozen=True, slots=True)
class BulkResult:
    done: int  # entries retried, killed or deleted
    unreadable: int  # entries that matched but can't be retried (left in place)
    gone: int  # entries someone else took meanwhile
    wrong_type: tuple[str, ...] = ()  # keys of the wrong type that kept entries in place


def retry_all(
    client: redis.Redis, scripts: Scripts, set_name: str, match: Filter | None = None
) -> BulkResult:
    """Retry now every entry that matches; unreadable ones stay where they are. In the sharded layout
    each partition's entries go back in pipelines on that partition's client."""
    chosen = entries(client, set_name, match)
    done = gone = unreadable = 0
    now = time.time()
    for group in set_places.by_partition(chosen):
        holder = set_places.holder(client, group[0])
        for start in range(0, len(group), BATCH):
            pipe = holder.pipeline(transaction=False)
            for entry in group[start : start + BATCH]:
                if not entry.readable or entry.queue is None:
                    unreadable += 1
                    continue
                try:
                    text = requeued_text(entry, now)
                    names = _graduate_keys(entry)
                except NotRetryable:
                    unreadable += 1
                    continue
                scripts.run("graduate", names, [entry.raw, text, entry.queue], client=pipe)
            replies = pipe.execute() if len(pipe) else []
            moved = [int(r) for r in replies if key_guard.script_wrong_type(r) is None]
            done += sum(moved)
            gone += moved.count(0)
            wrong = _wrong_type_keys(client, replies)
            if wrong:
                return BulkResult(done, unreadable, gone, wrong)
    return BulkResult(done, unreadable, gone)


def _wrong_type_keys(client: redis.Redis, replies: list[Any]) -> tuple[str, ...]:
    """Keys scripts reported of the wrong type (the workers' key guard is asked to move them)."""
    found = tuple(dict.fromkeys(k for k in map(key_guard.script_wrong_type, replies) if k is not None))
    if found:
        key_guard.request(client, *found)
    return found


def delete_all(client: redis.Redis, set_name: str, match: Filter | None = None) -> BulkResult:
    """Delete every entry that matches (without a filter: the whole set, in one step; in the sharded
    layout one step per partition)."""
    if match is None or match.empty:
        places = set_fanout.partitions(client) if sharded() else [None]
        removed = 0
        for partition in places:
            removed += _clear(client, set_name, partition)
        return BulkResult(removed, 0, 0)
    chosen = entries(client, set_name, match)
    done = 0
    for group in set_places.by_partition(chosen):
        holder, key = set_places.holder(client, group[0]), set_key(set_name, group[0].partition)
        texts = [e.raw for e in group]
        for start in range(0, len(texts), BATCH):
            done += holder.zrem(key, *texts[start : start + BATCH])
    return BulkResult(done, 0, len(chosen) - done)


def _clear(client: redis.Redis, set_name: str, partition: Partition | None) -> int:
    """Empty one set (a partition's in the sharded layout). One command that counts what it removes
    and refuses a key of another type. (MULTI with ZCARD then DEL ran the DEL after the ZCARD failed,
    deleting a key that wasn't the set.)"""
    key = set_key(set_name, partition)
    try:
        return int(set_fanout.client_of(client, partition).zremrangebyrank(key, 0, -1))
    except redis.ResponseError as exc:
        if key_guard.is_wrong_type(exc):
            raise WrongTypeKey(str(key_guard.wrong_type_error(client, key))) from exc
        raise


def killed_payload(entry: Entry, now: float) -> dict[str, Any]:
    """The dead entry for a killed one: its payload as it was (an unreadable one wrapped whole), with
    `killed_at`, and an error saying an operator killed it unless it carries a failure already."""
    job: dict[str, Any] = dict(entry.payload or {}) or {"class": UNREADABLE, **codec.raw_fields(entry.raw)}
    if "error_class" not in job:
        job["error_class"] = KILLED
        job["error_message"] = f"killed by an operator from the {entry.set} set"
    job["killed_at"] = now
    return job


def _kill_script(scripts: Scripts, settings: Settings, entry: Entry, now: float, client: Any) -> Any:
    """bury.lua: written to dead, then taken out of its set, only if it is still there."""
    # Lenient: an entry JSON can't hold as it is (nested too deep) is still killed, sanitised.
    text = codec.dumps_lenient(killed_payload(entry, now))[0]
    p = entry.partition
    # In the sharded layout the partition's own dead set, counter and death notices: one slot.
    names = (
        [set_key(entry.set), keys.DEAD, keys.STAT_FAILED, keys.DEATHS]
        if p is None
        else [set_key(entry.set, p), shards.dead(p), shards.stat(p, "failed"), shards.deaths(p)]
    )
    return scripts.run(
        "bury",
        names,
        [
            entry.raw,
            now,
            text,
            "0",
            settings.dead_max_jobs,
            now - settings.dead_timeout_s,
            # The workers' on_death hooks run for a killed job too (api/death.py).
            death.notice(death.KILLED, text),
            settings.death_notices_max,
        ],
        client=client,
    )


def _after_kill(client: redis.Redis, scripts: Scripts, settings: Settings, entry: Entry) -> None:
    """What every filing in dead does: its locks are released, a tracked status says "failed"."""
    if entry.payload is None:
        return
    Locks(client, scripts, Outages()).release_terminal(entry.payload)
    # Best-effort, as every status write: the kill itself is done.
    with contextlib.suppress(redis.RedisError):
        record_failed(client, settings.status_ttl_s, killed_payload(entry, time.time()))


def _killable(set_name: str) -> None:
    if set_name not in KILLABLE:
        raise OpsError(f"the {set_name} set's entries can't be killed: use one of {', '.join(KILLABLE)}")


def kill(
    client: redis.Redis,
    scripts: Scripts,
    settings: Settings,
    set_name: str,
    ref: str,
    score: float | None = None,
) -> Entry:
    """Move a retry or scheduled entry to dead, in one script. Of two operators killing one entry at
    once exactly one succeeds; the other gets NotFound. Returns the entry killed."""
    _killable(set_name)
    for _ in range(ATTEMPTS):
        entry = get(client, set_name, ref, score)
        reply = _kill_script(scripts, settings, entry, time.time(), set_places.holder(client, entry))
        if _check_reply(client, reply, entry):
            _after_kill(client, scripts, settings, entry)
            return entry
    raise NotFound(f"job {ref} in the {set_name} set changed while being killed: try again")


def kill_all(
    client: redis.Redis, scripts: Scripts, settings: Settings, set_name: str, match: Filter | None = None
) -> BulkResult:
    """Kill every entry that matches (unreadable ones too: dead keeps them whole)."""
    _killable(set_name)
    chosen = entries(client, set_name, match)
    done = gone = 0
    for group in set_places.by_partition(chosen):
        holder = set_places.holder(client, group[0])
        for start in range(0, len(group), BATCH):
            batch = group[start : start + BATCH]
            now = time.time()
            pipe = holder.pipeline(transaction=False)
            for entry in batch:
                _kill_script(scripts, settings, entry, now, pipe)
            replies = pipe.execute()
            for entry, reply in zip(batch, replies, strict=True):
                if key_guard.script_wrong_type(reply) is not None:
                    continue
                if reply:
                    done += 1
                    _after_kill(client, scripts, settings, entry)
                else:
                    gone += 1
            wrong = _wrong_type_keys(client, replies)
            if wrong:
                return BulkResult(done, 0, gone, wrong)
    return BulkResult(done, 0, gone)
