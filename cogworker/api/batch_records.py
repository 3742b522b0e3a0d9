"""A batch's records in Redis: its callbacks as stored, `batch_open.lua`, holds, members leaving.

api/batch.py is the batch API (`cogworker.batch`, holds, members joining at push); this is what it
writes: the callbacks' payloads stored in the batch's hash for the script that decides to push them,
the one script that creates a batch, holds it and adds members, and the removal of members never
written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import redis
import structlog

from cogworker import codec
from cogworker.api import batch_holds, client, push_shards
from cogworker.api.decorator import JobFunction, JobSetter
from cogworker.store import batch_scripts, key_guard, keys, shards


class BatchIds(Protocol):
    """What these records need of a batch (api/batch.py's Batch), named here so this module needn't
    import that one, which imports this one."""

    bid: str
    up: list[str]
    queues: list[str]


_log = structlog.get_logger("cogworker.batch")

Callback = JobFunction[..., Any] | JobSetter[..., Any]


def add_callbacks(
    fields: dict[str, str],
    callbacks: dict[str, Callback | None],
    bid: str,
    callback_args: Sequence[Any] | dict[str, Any],
    parent: BatchIds | None,
) -> list[str]:
    """Add each callback given (kind -> job) to a new batch's `fields`, as the script that decides
    will push it; returns their queues."""
    queues: list[str] = []
    for kind, fn in callbacks.items():
        if fn is None:
            continue
        text, queue, jid = _callback(fn, kind, bid, callback_args, parent)
        fields |= {
            f"cb:{kind}": text,
            f"cbq:{kind}": queue,
            f"cbjid:{kind}": jid,
            f"cbstate:{kind}": "waiting",
        }
        if shards.is_sharded():
            # The partition its push goes to, chosen now by its pre-assigned jid, so every mover of
            # its outbox entry sends it to the same one (store/batch_ends.py).
            fields[f"cbp:{kind}"] = str(push_shards.partition_of({"queue": queue, "jid": jid}).index)
        queues.append(queue)
    return queues


def _callback(
    fn: Callback, kind: str, bid: str, callback_args: Sequence[Any] | dict[str, Any], parent: BatchIds | None
) -> tuple[str, str, str]:
    """The callback's payload as stored (a JSON object without its closing brace: the script adds the
    push time), its queue and its jid."""
    if not isinstance(fn, JobFunction | JobSetter):
        raise TypeError(f"on_{kind} takes a job (or job.set(...)), not {type(fn).__name__}")
    if isinstance(callback_args, dict):
        args, kwargs = [bid], dict(callback_args)
    else:
        args, kwargs = [bid, *callback_args], {}
    options = dict(fn.options)
    queue = str(options.get("queue") or fn.job.queue)
    job = client.build_job(fn.job.name, args, kwargs, queue=queue, options=options, at=None)
    job["bcb"] = [bid, kind]
    if parent is not None:
        job["bid"] = parent.bid
        if parent.up:
            job["bup"] = parent.up
        if parent.queues:
            job["bq"] = parent.queues
    job.pop("enqueued_at", None)
    text = codec.dumps(job)
    return text[: text.rindex("}")], queue, str(job["jid"])


def run_open(bid: str, up: Sequence[str], args: list[Any]) -> bool:
    """Run batch_open.lua on the batch `bid` (its parents `up`, nearest first) with `args`: its
    reply, true when it created, held or added to the batch (WrongTypeKey for a key of another type)."""
    parent = up[0] if up else None
    script_keys = [
        keys.batch(bid),
        keys.batch_pending(bid),
        keys.BATCHES,
        keys.batch(parent) if parent else keys.batch(bid),
        keys.batch_pending(parent) if parent else keys.batch_pending(bid),
        keys.BATCH_LEASES,
    ]
    conn = client.connection()
    reply = batch_scripts.run(conn, "batch_open", script_keys, args)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
    return bool(reply)


def leave(bid: str, jids: list[str]) -> None:
    """Members that will never be written leave the batch, counted by what was registered (the
    block still holds the batch, so nothing is decided meanwhile). Best-effort: a failure is logged,
    and the batch then waits for members that never run."""
    try:
        conn = client.connection()
        removed = int(conn.srem(keys.batch_pending(bid), *jids))
        if removed:
            conn.hincrby(keys.batch(bid), "total", -removed)
    except redis.RedisError as exc:
        _log.error("batch_members_not_removed", bid=bid, jids=jids[:10], error=f"{type(exc).__name__}: {exc}")


def held(target: BatchIds, name: str, value: str) -> batch_holds.Hold:
    """The hold `name` on `target` that batch_open.lua took; a lease is renewed until released."""
    hold = batch_holds.Hold(target.bid, list(target.up), list(target.queues), name, value)
    if hold.is_lease:
        batch_holds.keep_renewed(hold, client.connection(), lease_s())
    return hold


def release(hold: batch_holds.Hold) -> None:
    batch_holds.release(client.connection(), hold, client.settings().batch_ttl_s)


def lease_s() -> float:
    return client.settings().batch_hold_lease_s


def strings(value: Any) -> list[str]:
    """The strings of a payload's list field (`bup`, `bq`); anything else is none."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
