"""The key guard: cogworker's keys must have the types it expects.

A key of the wrong type (someone SET a queue name, a tool wrote a hash where a list belongs) would
fail every poll that touches it. It is renamed aside under the quarantine prefix, with a TTL, and
logged, so the work behind it goes on and a human can look at what it held.

Every `key_guard_interval_s` each worker's poller checks the fixed keys, the queues (with their
suspects lists) and the in-progress lists. Any component that meets a wrong-type key sooner (a
script's `{"wrongtype", key}` reply, a WRONGTYPE error) asks for a check at once with `request`: the
key goes into `cogworker:key-guard:requests`, which every poller reads on each poll, so the guard
runs within a poll interval even when the one who saw it is a client with no poller of its own.

In the sharded layout (store/shards.py) the guard also knows each queue partition's keys
(store/partition_keys.py): it checks them through their own slots' clients (store/fanout.py) and moves a
wrong-type one aside within its slot; a key outside cogworker's families is never touched.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
import structlog

from cogworker.settings_fields import SettingsFields
from cogworker.store import fanout, keys, partition_keys, scripts, shards

log = structlog.get_logger("cogworker.key_guard")

WRONG_TYPE_STATUS = "wrongtype"
# A request nobody takes (no worker running) must not linger for ever.
REQUEST_TTL_S = 3600
REQUESTS_PER_POLL = 100
TYPE_NAMES = {
    "string": "a string",
    "list": "a list",
    "set": "a set",
    "zset": "a sorted set",
    "hash": "a hash",
    "stream": "a stream",
}

# The poller of this process, if it runs one: a request made here wakes it at once.
_local_poller: Callable[[], None] | None = None


class WrongTypeKey(redis.ResponseError):
    """A cogworker key holds another type of value than it should; nothing was written to it.

    Raised by a push or a batch operation that met such a key (something other than cogworker wrote
    it). A running worker's key guard moves the key aside within seconds; with none running, run
    `cogworker doctor --fix`. Then try again: nothing of the failed call was written.

    Attributes:
        key: The key.
        found: The type it holds ("string", "hash"...), or None when unknown.
    """

    def __init__(self, key: str, found: str | None) -> None:
        self.key = key
        self.found = found
        super().__init__(wrong_type_message(key, found))


def _a(kind: str | None) -> str:
    return TYPE_NAMES.get(kind or "", f"a {kind}")


def wrong_type_message(key: str, found: str | None) -> str:
    want = expected_type(key)
    holds = f"holds {_a(found)}" if found and found != "none" else "holds the wrong type of value"
    should = f", not {_a(want)}" if want else ""
    return (
        f"{key} {holds}{should}, so nothing was written to it. A running worker's key guard moves it "
        f"aside (to {keys.QUARANTINE_PREFIX}*) within seconds: it has been asked to. With no worker "
        "running, run `cogworker doctor --fix`. Then try again."
    )


def is_wrong_type(exc: BaseException) -> bool:
    return isinstance(exc, redis.ResponseError) and (isinstance(exc, WrongTypeKey) or "WRONGTYPE" in str(exc))


def script_wrong_type(reply: Any) -> str | None:
    """The key a script named in a `{"wrongtype", key}` reply; None for any other reply."""
    if isinstance(reply, list) and len(reply) == 2:
        status, key = reply
        if status in (WRONG_TYPE_STATUS, WRONG_TYPE_STATUS.encode()):
            return key.decode() if isinstance(key, bytes) else str(key)
    return None


def request(client: redis.Redis, *names: str) -> bool:
    """Ask the key guards to check these keys now (best-effort: on failure the periodic pass still
    finds the fixed keys). True when the request was recorded."""
    recorded = False
    if names:
        try:
            pipe = client.pipeline(transaction=False)
            pipe.sadd(keys.GUARD_REQUESTS, *names)
            pipe.expire(keys.GUARD_REQUESTS, REQUEST_TTL_S)
            pipe.execute()
            recorded = True
        except redis.RedisError as exc:
            log.warning("key_guard_request_failed", keys=list(names), error=f"{type(exc).__name__}: {exc}")
    # Woken after the request is written, so that its pass takes the keys named.
    nudge = _local_poller
    if nudge is not None:
        nudge()
    return recorded


def wrong_type_error(client: redis.Redis, key: str) -> WrongTypeKey:
    """The error to raise for `key`, naming what it holds; the key guards are asked to act."""
    try:
        found: str | None = str(fanout.clients_of(client).for_key(key).type(key))
    except redis.RedisError:
        found = None
    request(client, key)
    return WrongTypeKey(key, found)


def take_requests(client: redis.Redis) -> list[str]:
    """Keys asked for since the last take (each request goes to one process). Raises a WRONGTYPE
    error when the request set itself has the wrong type: the caller then runs a full check."""
    taken = client.spop(keys.GUARD_REQUESTS, REQUESTS_PER_POLL)
    return sorted({k.decode() if isinstance(k, bytes) else str(k) for k in taken or []})


def set_local_poller(nudge: Callable[[], None] | None) -> None:
    global _local_poller
    _local_poller = nudge


def expected_type(key: str) -> str | None:
    if shards.partition_of_key(key) is not None:
        return partition_keys.expected_type(key)
    if key in keys.EXPECTED_TYPES:
        return keys.EXPECTED_TYPES[key]
    for prefix, kind in keys.EXPECTED_PREFIX_TYPES.items():
        if key.startswith(prefix):
            return kind
    return None


def keys_to_check(client: redis.Redis, queue_names: tuple[str, ...]) -> list[str]:
    names = set(queue_names)
    if client.type(keys.QUEUES) == "set":
        names |= {str(n) for n in client.smembers(keys.QUEUES)}
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    # Today's counters too: the fetch and settle scripts write them with every acknowledgement and
    # failure, and would stop at a wrong-type one.
    checked = [*keys.EXPECTED_TYPES, keys.stat_processed_day(day), keys.stat_failed_day(day)]
    checked += [keys.stat_day(outcome, day) for outcome in keys.ENDED_UNRUN]
    if shards.is_sharded():
        # The queues' lists and the in-progress lists are the partitions' (the home slot has none).
        return checked + partition_keys.keys_to_check(client, tuple(sorted(names)))
    checked += [key for n in sorted(names) for key in (keys.queue(n), keys.suspects(n))]
    if client.type(keys.IN_PROGRESS_IDENTITIES) == "set":
        checked += [keys.in_progress(str(i)) for i in client.smembers(keys.IN_PROGRESS_IDENTITIES)]
    return checked


def types_of(client: redis.Redis, names: list[str]) -> list[str]:
    """TYPE of each key, in order: one pipeline on `client`, or in the sharded layout one per slot's
    client (store/fanout.py), sent at once."""
    if not shards.is_sharded():
        pipe = client.pipeline(transaction=False)
        for key in names:
            pipe.type(key)
        return [str(kind) for kind in pipe.execute()]
    found = fanout.keyed(client, names, lambda pipe, key: pipe.type(key))
    return [str(found[key][0]) for key in names]


def check(
    client: redis.Redis,
    settings: SettingsFields,
    queue_names: tuple[str, ...] = (),
    extra: Iterable[str] = (),
) -> list[str]:
    """Quarantine every checked key whose type is wrong; returns the quarantine keys made. `extra`:
    keys someone found of the wrong type (only cogworker's own, with a known type, are checked)."""
    candidates = keys_to_check(client, queue_names)
    candidates += [k for k in dict.fromkeys(extra) if expected_type(k) is not None and k not in candidates]
    moved: list[str] = []
    move = client.register_script(scripts.source("quarantine"))
    for key, kind in zip(candidates, types_of(client, candidates), strict=True):
        want = expected_type(key)
        if kind == "none" or want is None or kind == want:
            continue
        # In the key's own slot: the home slot's quarantine, or (sharded layout) its partition's.
        target = partition_keys.quarantine_key(key, f"{time.time():.6f}")
        owner = fanout.clients_of(client).for_key(key)
        found = move(keys=[key, target], args=[want, int(settings.quarantine_ttl_s)], client=owner)
        if found is None:
            continue  # moved by another process's guard first (and maybe made anew, rightly typed)
        log.error("wrong_type_key_quarantined", key=key, found=str(found), expected=want, moved_to=target)
        moved.append(target)
    return moved


def quarantined(client: redis.Redis) -> list[str]:
    """Every record moved aside; in the sharded layout on every master (the partitions' too)."""
    if shards.is_sharded():
        return fanout.scan_all(client, partition_keys.quarantine_pattern(), count=500)
    return sorted(str(k) for k in client.scan_iter(match=keys.QUARANTINE_PREFIX + "*", count=500))
