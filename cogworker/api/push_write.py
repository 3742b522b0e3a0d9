"""The write at the end of a push: jobs to their queues or the schedule, in one `push_batch.lua` call.

One perform_async and each batch of push_bulk take the same path, so both are all-or-nothing, check
only the keys they write to, and leave the marker that tells a client whose reply was lost whether
its write happened (api/push_outcome.py). With COGWORKER_REDIS_MIN_REPLICAS a WAIT rides in the same
round trip (store/replicas.py).

In the sharded layout (store/shards.py) a write goes to one queue partition: its keys (queue,
schedule, registry, wake channel, markers) are named in that partition's slot and it is sent on that
partition's client, the WAIT with it, so the WAIT asks the master that holds the write
(api/push_shards.py splits a push over partitions). Outside it the keys are today's, unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis
import structlog
from redis.commands.core import Script

from cogworker.api import payload
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard, keys, replicas, scripts, shards

# How long a job's `pushed:<jid>` marker lives: the client asks about it at once after a lost reply,
# and a caller pushing the same payload again (its jid) within this time makes no second copy. Every
# push leaves one (about 180 bytes of Redis memory), so this is also what idempotence costs: at 1,000
# pushes a second, two minutes of markers are about 20 MB.
MARK_TTL_S = 120

_log = structlog.get_logger("cogworker.client")


def write(
    conn: redis.Redis,
    settings: SettingsFields,
    batch: Sequence[dict[str, Any]],
    attempt: str,
    partition: shards.Partition | None = None,
    home: redis.Redis | None = None,
    mark_ttl_s: int = MARK_TTL_S,
) -> None:
    """Write `batch` as write attempt `attempt`: every job, or none when a key it goes to has the wrong
    type (key_guard.WrongTypeKey names it). A job whose jid an earlier attempt wrote is not written
    again. replicas.NotReplicated: written, but too few replicas confirmed it. With `partition` (the
    sharded layout), every job of `batch` is of its queue, `conn` is its client and `home` the home
    slot's (where a wrong-type key is reported to the key guard). `mark_ttl_s`: how long the markers
    live (an outbox's pushes keep theirs longer: store/outbox.py)."""
    if not batch:
        return
    if partition is not None and home is None:
        raise ValueError("a write to a partition needs the home client (wrong-type keys are reported there)")
    script_keys, args = plan(batch, attempt, partition, mark_ttl_s)
    script = _push_batch.on(conn)
    wait = replicas.wait_command(settings)
    waited: object = None
    if wait is None:
        reply = script(keys=script_keys, args=args, client=conn)
    else:
        reply, waited = _script_then_wait(conn, script, script_keys, args, wait)
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "unlisted":
        # The jobs are written, so the push stands (raising would have the caller push them twice);
        # only their queues' listing is missing until the key guard moves the registry aside.
        registry = script_keys[0]
        key_guard.request(home or conn, registry)
        _log.error("push_bookkeeping_failed", key=registry, jids=[str(j["jid"]) for j in batch][:10])
    else:
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            # Read in the key's own slot, reported in the home slot (key_guard.py).
            raise key_guard.wrong_type_error(home or conn, wrong)
    if wait is not None:
        replicas.check_push(settings, waited, [str(job["jid"]) for job in batch])


def plan(
    batch: Sequence[dict[str, Any]],
    attempt: str,
    partition: shards.Partition | None = None,
    mark_ttl_s: int = MARK_TTL_S,
) -> tuple[list[str], list[Any]]:
    """push_batch.lua's KEYS and ARGV for `batch` (the sync write and the awaitable one,
    api/aio_write.py, send the same): jobs due now to their queues, stamped `enqueued_at`; jobs due
    later to the schedule; a `pushed:<jid>` marker for each. With `partition`, its keys instead (every
    job of `batch` then goes to that partition's queue or schedule)."""
    now = time.time()
    by_queue: dict[str, list[dict[str, Any]]] = {}
    scheduled: list[dict[str, Any]] = []
    for job in batch:
        at = job.get("at")
        if at is not None and at > now:
            scheduled.append(job)
        else:
            job.pop("at", None)
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(job)
    args: list[Any] = [attempt, mark_ttl_s * 1000, len(by_queue)]
    jids: list[str] = []  # in the markers' order: queued, then scheduled
    for name, jobs in by_queue.items():
        args += [name, len(jobs), *(payload.stored(job) for job in jobs)]
        jids += [str(job["jid"]) for job in jobs]
    args.append(len(scheduled))
    for job in scheduled:
        args += [job["at"], payload.scheduled_text(job)]
        jids.append(str(job["jid"]))
    if partition is not None:
        return _partition_keys(partition, list(by_queue), jids), args
    queues = [keys.queue(name) for name in by_queue]
    markers = [keys.pushed(jid) for jid in jids]
    script_keys = [keys.QUEUES, keys.WAKE_CHANNEL, keys.SCHEDULE, *queues, *markers]
    return script_keys, args


def _partition_keys(p: shards.Partition, queue_names: list[str], jids: list[str]) -> list[str]:
    """The sharded layout's KEYS: the partition's own registry, wake channel, schedule and queue, and
    the jobs' markers in its slot."""
    if any(name != p.queue for name in queue_names):
        raise ValueError(f"a write to partition {p} holds jobs of another queue: {sorted(queue_names)}")
    queues = [shards.queue_key(p)] if queue_names else []
    markers = [shards.pushed(p, jid) for jid in jids]
    return [shards.registry(p), shards.wake_channel(p), shards.schedule(p), *queues, *markers]


def _script_then_wait(
    conn: redis.Redis, script: Script, script_keys: list[str], args: list[Any], wait: tuple[Any, ...]
) -> tuple[Any, Any]:
    """The script and the WAIT in one pipeline, one round trip (EVALSHA, not redis-py's script
    pipelining, which asks SCRIPT EXISTS first: a second round trip per batch)."""
    for command, body in (("EVALSHA", script.sha), ("EVAL", script.script)):
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command(command, body, len(script_keys), *script_keys, *args)  # type: ignore[no-untyped-call]
        pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
        reply, waited = pipe.execute(raise_on_error=False)
        if not isinstance(reply, redis.exceptions.NoScriptError):
            break
    if isinstance(reply, Exception):
        raise reply
    return reply, waited


# push_batch.lua registered with the job API's client.
_push_batch = scripts.ClientScript("push_batch")
