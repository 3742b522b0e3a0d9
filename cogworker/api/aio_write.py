"""The write at the end of an awaitable push, and the outcome check after it failed, on `redis.asyncio`.

The same protocol as the sync push, step for step: one `push_batch.lua` call writes the jobs with
their `pushed:<jid>` markers (api/push_write.py), the WAIT of COGWORKER_REDIS_MIN_REPLICAS rides in
the same round trip, and a write that got no answer is sorted out by `push_check.lua` before
anything is undone (api/push_outcome.py, whose rules are reused here: which failures may have run,
what an interruption means, PushOutcomeUnknown). A cancelled task (asyncio.CancelledError, a
BaseException) is an interruption: the write may have run, so nothing is undone and it goes on.

The script text is the one the sync client loads (store/scripts.py: the prelude's helpers in front,
the SHA over both), sent as EVALSHA and, after NOSCRIPT, as EVAL. The rare replies that name a
wrong-type key are turned into WrongTypeKey by the sync key guard on a thread, off the loop.

In the sharded layout a write and its check go to one queue partition, on that partition's
`redis.asyncio` client (store/async_connection.py), naming its keys (api/push_write.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from functools import cache
from typing import Any

import redis
import redis.asyncio as aredis
import structlog

from cogworker.api import client, push_outcome, push_write
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard, replicas, scripts, shards
from cogworker.store.connection import ENCODING, ENCODING_ERRORS

_log = structlog.get_logger("cogworker.client")


@cache
def _script(name: str) -> tuple[str, str]:
    """A script's text (with its prelude) and the SHA Redis knows it by."""
    text = scripts.source(name)
    return text, hashlib.sha1(text.encode(ENCODING, ENCODING_ERRORS)).hexdigest()


async def run_script(
    conn: aredis.Redis,
    name: str,
    script_keys: Sequence[str],
    args: Sequence[Any],
    then: tuple[Any, ...] | None,
) -> tuple[Any, Any]:
    """Run script `name`, with the command `then` (a WAIT) in the same round trip; both replies.
    The script's error is raised; `then`'s comes back as its reply."""
    text, sha = _script(name)
    for command, body in (("EVALSHA", sha), ("EVAL", text)):
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command(command, body, len(script_keys), *script_keys, *args)
        if then is not None:
            pipe.execute_command(*then)
        replies = await pipe.execute(raise_on_error=False)
        reply = replies[0]
        if not isinstance(reply, redis.exceptions.NoScriptError):
            break
    if isinstance(reply, Exception):
        raise reply
    return reply, (replies[1] if then is not None else None)


async def write(
    conn: aredis.Redis,
    settings: SettingsFields,
    batch: Sequence[dict[str, Any]],
    attempt: str,
    partition: shards.Partition | None = None,
) -> None:
    """push_write.write on `conn`: every job of `batch` or none; a jid written before isn't again.
    With `partition`, `conn` is that partition's client and every job is of its queue."""
    if not batch:
        return
    script_keys, args = push_write.plan(batch, attempt, partition)
    wait = replicas.wait_command(settings)
    reply, waited = await run_script(conn, "push_batch", script_keys, args, wait)
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "unlisted":
        # Written, so the push stands; only the queues' listing waits for the key guard.
        registry = script_keys[0]
        await asyncio.to_thread(key_guard.request, client.connection(), registry)
        _log.error("push_bookkeeping_failed", key=registry, jids=[str(j["jid"]) for j in batch][:10])
    else:
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            raise await asyncio.to_thread(_wrong_type_error, wrong)
    if wait is not None:
        replicas.check_push(settings, waited, [str(job["jid"]) for job in batch])


async def unwritten(
    conn: aredis.Redis,
    jobs: Sequence[dict[str, Any]],
    attempt: str,
    failure: BaseException,
    partition: shards.Partition | None = None,
) -> list[dict[str, Any]]:
    """push_outcome.unwritten on `conn`: the jobs known not to be written; PushOutcomeUnknown when
    that can't be known, the interruption itself (marked) when the write was interrupted."""
    jids = push_outcome.to_ask(jobs, failure)
    if jids is None:
        return list(jobs)
    try:
        codes = await _check(conn, jids, attempt, partition)
    except Exception as exc:
        raise push_outcome.unknown(jids, failure, exc) from failure
    return push_outcome.sorted_out(jobs, codes, failure)


async def _check(
    conn: aredis.Redis, jids: list[str], attempt: str, partition: shards.Partition | None
) -> list[int]:
    markers = push_outcome.markers(jids, partition)
    reply, _ = await run_script(conn, "push_check", markers, [attempt, push_outcome.FENCE_TTL_MS], None)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise await asyncio.to_thread(_wrong_type_error, wrong)
    return [int(code) for code in reply]


def _wrong_type_error(key: str) -> key_guard.WrongTypeKey:
    """The sync key guard's error for `key`: its type read in the key's own slot, reported through the
    sync client (the home slot's in the sharded layout)."""
    return key_guard.wrong_type_error(client.connection(), key)
