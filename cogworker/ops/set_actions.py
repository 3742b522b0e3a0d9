"""Acting on entries of the retry, scheduled and dead sets: retrying now, killing and deleting, one
entry or every entry a filter matches (listing and finding them is in sets.py).

Every change takes an entry out by its exact text (ZREM), in the same atomic step as anything it
writes, and only after that write: two operators (or an operator and a poller) acting on one entry
at once can't both win, so a job is never enqueued twice by a "retry now" nor filed twice in dead by
a "kill", and a key of the wrong type stops the step before anything changed.
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
from cogworker.ops import NotFound, OpsError
from cogworker.ops.sets import BATCH, UNREADABLE, Entry, Filter, entries, get, set_key
from cogworker.settings import Settings
from cogworker.store import key_guard, keys
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts

# An entry replaced while we act on it (the poison-pill swap in worker/recovering/recovery.py) is
# looked up again.
ATTEMPTS = 3


KILLABLE = ("retry", "scheduled")
KILLED = "cogworker.Killed"


class NotRetryable(OpsError):
    """The entry can't be put back on a queue (its payload is unreadable, or names no queue)."""


class WrongTypeKey(OpsError):
    """A key the action writes has the wrong type: nothing changed (the workers' guard is asked)."""


def _check_reply(client: redis.Redis, reply: Any) -> Any:
    """A script's reply, or WrongTypeKey naming the key when it reported one."""
    key = key_guard.script_wrong_type(reply)
    if key is not None:
        raise WrongTypeKey(str(key_guard.wrong_type_error(client, key)))
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
            [set_key(set_name), keys.queue(entry.queue), keys.QUEUES, keys.WAKE_CHANNEL],
            [entry.raw, text, entry.queue],
            client=client,
        )
        if _check_reply(client, moved):
            return entry
    raise NotFound(f"job {ref} in the {set_name} set changed while being retried: try again")


def delete(client: redis.Redis, set_name: str, ref: str, score: float | None = None) -> Entry:
    """Remove the entry; returns it. NotFound if it is gone (someone else acted on it first)."""
    for _ in range(ATTEMPTS):
        entry = get(client, set_name, ref, score)
        if client.zrem(set_key(set_name), entry.raw):
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
    """Retry now every entry that matches; unreadable ones stay where they are."""
    key = set_key(set_name)
    chosen = entries(client, set_name, match)
    done = gone = unreadable = 0
    now = time.time()
    for start in range(0, len(chosen), BATCH):
        pipe = client.pipeline(transaction=False)
        for entry in chosen[start : start + BATCH]:
            if not entry.readable or entry.queue is None:
                unreadable += 1
                continue
            try:
                text = requeued_text(entry, now)
            except NotRetryable:
                unreadable += 1
                continue
            scripts.run(
                "graduate",
                [key, keys.queue(entry.queue), keys.QUEUES, keys.WAKE_CHANNEL],
                [entry.raw, text, entry.queue],
                client=pipe,
            )
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
    """Delete every entry that matches (without a filter: the whole set, in one step)."""
    key = set_key(set_name)
    if match is None or match.empty:
        # One command that counts what it removes and refuses a key of another type. (MULTI with
        # ZCARD then DEL ran the DEL after the ZCARD failed, deleting a key that wasn't the set.)
        try:
            removed = client.zremrangebyrank(key, 0, -1)
        except redis.ResponseError as exc:
            if key_guard.is_wrong_type(exc):
                raise WrongTypeKey(str(key_guard.wrong_type_error(client, key))) from exc
            raise
        return BulkResult(int(removed), 0, 0)
    chosen = [e.raw for e in entries(client, set_name, match)]
    done = 0
    for start in range(0, len(chosen), BATCH):
        done += client.zrem(key, *chosen[start : start + BATCH])
    return BulkResult(done, 0, len(chosen) - done)


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
    return scripts.run(
        "bury",
        [set_key(entry.set), keys.DEAD, keys.STAT_FAILED, keys.DEATHS],
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
        if _check_reply(client, _kill_script(scripts, settings, entry, time.time(), client)):
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
    for start in range(0, len(chosen), BATCH):
        batch = chosen[start : start + BATCH]
        now = time.time()
        pipe = client.pipeline(transaction=False)
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
