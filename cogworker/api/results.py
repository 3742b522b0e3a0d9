"""Job results: `@job(result_ttl=...)` keeps a job's return value (or its final error) in Redis, and
`cogworker.result(jid, timeout=...)` waits for it.

Opt-in per job (`result_ttl` seconds, carried in the payload) or for every job pushed with
`COGWORKER_RESULT_TTL_S` set (decided at push, like `status_all`: the pushing side is the one that
will wait, and a worker follows what the payload says). `result_ttl=0` keeps none.

What is kept, as JSON in the string `cogworker:result:<jid>` for `result_ttl` seconds:
- success: `{"ok": true, "value": ...}`, the return value, which must be JSON-native: anything else
  fails the job with a TypeError naming the type and where it sits (the check pushes make of
  arguments), following the retry policy. Jobs that keep no result may return anything, as always.
- failure for good (sent to dead by the worker: retries exhausted, `retry=False`):
  `{"ok": false, "error_class": ..., "error_message": ...}`. A failure that will be retried writes
  nothing: a waiter keeps waiting for the next try.

The worker writes the record and publishes it on the channel `cogworker:result-ready:<jid>` in one
round trip (a pipeline), from the job thread after the body and before the job's ack or dead filing
(worker/settling/settle.py: a failed write is kept and retried, the ack held back meanwhile). A job that runs
twice (its process died before the ack) writes again: the result is the last completed run's.

A waiter reads the key; if absent it SUBSCRIBEs to the jid's channel, waits for the confirmation
(so a result written from then on can't be missed), reads the key again, then blocks on the socket
for the message: three commands in all, however long it waits. No Redis is polled.

The testing modes (cogworker.testing) keep results in this process's memory instead: `drain`,
`perform_one` and `inline` record them with the same rules (every failure there is final: nothing
is retried), and `result()` answers from memory while a mode is on.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from cogworker import codec
from cogworker.api import client
from cogworker.api.payload import check_json_native
from cogworker.store import keys

# Keeping a result longer than ten years would overflow Redis's expiry, as for every *_S setting.
MAX_TTL_S = 10 * 365 * 24 * 3600.0
# How long one wait on the subscription's socket lasts before the deadline is looked at again. Only
# the socket is waited on: no command is sent between slices.
WAIT_SLICE_S = 30.0


class JobFailed(Exception):
    """The job failed for good (it went to dead): raised by `cogworker.result(jid)`.

    Its error is the job's final one. The job will not run again by itself; retry it from the dead
    set (`cogworker` CLI, Web UI) once the cause is fixed, or push it anew.

    Attributes:
        jid: The job's id.
        error_class: The class of the job's error, as its dead entry records it.
        error_message: The error's message.
    """

    def __init__(self, jid: str, error_class: str, error_message: str) -> None:
        super().__init__(f"job {jid} failed: {error_class}: {error_message}")
        self.jid = jid
        self.error_class = error_class
        self.error_message = error_message


class ResultTimeout(TimeoutError):
    """No result within the timeout: raised by `cogworker.result(jid, timeout=...)`.

    The job hasn't finished, keeps no result (no `result_ttl`), its result expired, or the jid is
    unknown: Redis can't tell these apart. Call again to wait longer; `cogworker.status(jid)` tells
    a job still running from one that is gone (when it tracks its status).

    Attributes:
        jid: The job's id.
        timeout: The seconds waited.
    """

    def __init__(self, jid: str, timeout: float) -> None:
        super().__init__(
            f"no result for job {jid} within {timeout:g}s (not finished, no result_ttl, or expired)"
        )
        self.jid = jid
        self.timeout = timeout


def _check_ttl(value: Any) -> None:
    if value is None:
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 <= value <= MAX_TTL_S:
        raise TypeError(
            f"result_ttl must be seconds above 0 (at most ten years), or 0 to keep no result, not {value!r}"
        )


# The job option this feature reads from a payload, with the check `@job(...)` runs on it.
OPTIONS: dict[str, Callable[[Any], None] | None] = {"result_ttl": _check_ttl}


def ttl_s(job: dict[str, Any]) -> float | None:
    """How long this job's result is kept, or None when it keeps none. A value no push writes (a
    payload from elsewhere) keeps none."""
    value = job.get("result_ttl")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return float(min(value, MAX_TTL_S))


def success_record(name: str, value: Any) -> str:
    """The record of a successful run. Raises TypeError (the job's failure) for a value that isn't
    JSON-native, naming its type and where inside the value it is."""
    try:
        check_json_native(value, "return value")
    except TypeError as exc:
        raise TypeError(
            f"job {name} keeps its result (result_ttl) but returned a value JSON can't hold: {exc}"
        ) from None
    return codec.dumps({"ok": True, "value": value})


def failure_record(error: dict[str, Any]) -> str:
    """The record of a failure for good, from the error's fields (`error_class`, `error_message`:
    payload.error_fields of the exception, or the dead entry that holds them)."""
    return codec.dumps(
        {"ok": False, **{name: str(error.get(name, "")) for name in ("error_class", "error_message")}}
    )


def store(conn: redis.Redis, jid: str, record: str, ttl: float) -> None:
    """Write the record with its TTL and tell waiters, in one round trip. SET replaces a key of any
    type, so no key can stop it. Raises on a Redis error (the settler keeps it and retries)."""
    pipe = conn.pipeline(transaction=True)
    pipe.set(keys.result(jid), record, px=max(1, int(ttl * 1000)))
    pipe.publish(keys.result_channel(jid), record)
    pipe.execute()


# The testing modes' results: jid -> record, in this process's memory.
_memory: dict[str, str] = {}
_memory_changed = threading.Condition()


def _renew_lock() -> None:
    # A forked child would keep a lock another thread held at the fork held forever
    # (docs/architecture.md, "Locks across a fork").
    global _memory_changed
    _memory_changed = threading.Condition()


os.register_at_fork(after_in_child=_renew_lock)


def remember(jid: str, record: str) -> None:
    with _memory_changed:
        _memory[jid] = record
        _memory_changed.notify_all()


def forget_all() -> None:
    with _memory_changed:
        _memory.clear()


def result(jid: str, timeout: float | None = None) -> Any:
    """Return a job's return value, waiting for it if it hasn't finished.

    Only a job that keeps its result (`@job(result_ttl=...)`, or COGWORKER_RESULT_TTL_S) has one.
    The result is not consumed: every caller until it expires gets it. No Redis is polled while
    waiting: the wait is on a subscription.

    Args:
        jid: The job's id, as its push returned it.
        timeout: How long to wait, in seconds; None waits as long as it takes (as Celery's `get()`
            and arq's `result()`), 0 only looks. Give one when a result might never come.

    Returns:
        The job's return value, as JSON gave it back (lists for tuples, for instance).

    Raises:
        JobFailed: The job failed for good (it went to dead).
        ResultTimeout: No result came in time: not finished, keeps no result, expired, or unknown.
        TypeError: `jid` is not a str, or `timeout` is not a number or None.
        ValueError: `jid` is empty, or `timeout` is negative or NaN.
        redis.RedisError: Redis failed while waiting; call again to wait on.

    Example:
        >>> jid = resize.set(result_ttl=3600).perform_async(path)  # doctest: +SKIP
        >>> cogworker.result(jid, timeout=30)  # doctest: +SKIP
    """
    if not isinstance(jid, str):
        raise TypeError(f"jid must be a str, not {type(jid).__name__}")
    if not jid:
        raise ValueError("jid must not be empty")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be seconds (a number) or None, not {type(timeout).__name__}")
        if math.isnan(timeout) or timeout < 0:
            raise ValueError(f"timeout must be 0 or more seconds, or None to wait for ever, not {timeout!r}")
    deadline = None if timeout is None or math.isinf(timeout) else time.monotonic() + timeout
    if client.redis_in_use():
        record = _wait_redis(client.connection(), jid, deadline, timeout == 0)
    else:
        record = _wait_memory(jid, deadline)
    if record is None:
        raise ResultTimeout(jid, math.inf if timeout is None else timeout)
    return _answer(jid, record)


def _answer(jid: str, record: str) -> Any:
    found = codec.loads(record)
    if not isinstance(found, dict) or not isinstance(found.get("ok"), bool):
        raise ValueError(f"the result stored for job {jid} is not a cogworker result record")
    if found["ok"]:
        return found.get("value")
    raise JobFailed(jid, str(found.get("error_class", "")), str(found.get("error_message", "")))


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _wait_redis(conn: redis.Redis, jid: str, deadline: float | None, look_only: bool) -> str | None:
    key = keys.result(jid)
    found: str | None = conn.get(key)  # type: ignore[assignment]
    if found is not None or look_only:
        return found
    pubsub = conn.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    try:
        pubsub.subscribe(keys.result_channel(jid))
        # Read the key only once the subscription is live: a result written after that read is
        # published to us, one written before it is what the read returns.
        confirmed = False
        while not confirmed:
            message = _next_message(pubsub, deadline)
            if message is None:
                return None
            confirmed = message.get("type") == "subscribe"
        found = conn.get(key)  # type: ignore[assignment]
        while found is None:
            message = _next_message(pubsub, deadline)
            if message is None:
                return None
            if message.get("type") == "message":
                found = str(message["data"])
        return found
    finally:
        # Closing drops the connection, which ends the subscription: no UNSUBSCRIBE to send.
        pubsub.close()


def _next_message(pubsub: redis.client.PubSub, deadline: float | None) -> dict[str, Any] | None:
    """The subscription's next message, waiting on its socket until the deadline; None at the deadline."""
    while True:
        left = _left(deadline)
        if left is not None and left <= 0:
            return None
        message = pubsub.get_message(timeout=WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S))
        if message is not None:
            return message  # type: ignore[no-any-return]


def _wait_memory(jid: str, deadline: float | None) -> str | None:
    with _memory_changed:
        while jid not in _memory:
            left = _left(deadline)
            if left is not None and left <= 0:
                return None
            _memory_changed.wait(timeout=left)
        return _memory[jid]
