"""The built-in client middleware that talk to Redis, ported to `redis.asyncio` for awaitable pushes.

`unique.claim` and `job_status.on_push` call the sync client, which would block the event loop. An
awaitable push (api/aio_client.py) runs these in their place, at their place in the client chain;
each does what its sync twin does, in the same order, with the same keys and the same decisions
(their modules' docstrings are the reference):

- `claim`: SET NX PX of the unique key; a duplicate (another jid holds it) stops the push with None;
  the claim is given back, owner-checked, when the push didn't happen, and kept when the job is or
  may be queued (`push_outcome.may_be_queued`).
- `on_push`: decide whether the job is tracked (COGWORKER_STATUS_ALL), write "queued" before the job,
  forget it when the push didn't happen. Best-effort, as every status write is.

Failures are reported through the sync modules' outage trackers, so one outage logs once whichever
kind of push met it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aredis
import structlog

from cogworker.api import aio_write, client, job_status, unique
from cogworker.api.push_outcome import may_be_queued
from cogworker.store import key_guard, keys
from cogworker.store.locks import UNTIL_EXECUTED, unique_digest

log = structlog.get_logger("cogworker.unique")

AsyncNext = Callable[[dict[str, Any]], Awaitable[Any]]
AsyncMiddleware = Callable[[dict[str, Any], AsyncNext, aredis.Redis], Awaitable[Any]]


async def claim(job: dict[str, Any], call_next: AsyncNext, conn: aredis.Redis) -> Any:
    """unique.claim: take the claim, or stop a duplicate push (returns None)."""
    if job.get("unique") != UNTIL_EXECUTED or not client.redis_in_use():
        return await call_next(job)
    key = keys.unique(unique_digest(job))
    jid = str(job["jid"])
    ttl_ms = unique.lock_ttl_ms(job, client.settings().unique_ttl_s, time.time())
    try:
        claimed = await conn.set(key, jid, nx=True, px=ttl_ms)
    except (redis.ConnectionError, redis.TimeoutError):
        # Its reply may be lost after the claim was taken, for a job never pushed: give it back.
        await _give_back(conn, key, jid)
        raise
    if not claimed:
        holder = await _holder(conn, key)
        if holder != jid:
            log.debug("unique_duplicate_skipped", job=job.get("class"), holder=holder)
            return None
        # Its own claim: the same payload sent again after PushOutcomeUnknown; the write finds out.
    try:
        pushed = await call_next(job)
    except BaseException as exc:
        if not may_be_queued(exc):
            await _give_back(conn, key, jid)
        raise
    if pushed is None:
        await _give_back(conn, key, jid)
    return pushed


async def _holder(conn: aredis.Redis, key: str) -> str | None:
    try:
        holder = await conn.get(key)
    except redis.ResponseError as exc:
        if key_guard.is_wrong_type(exc):
            raise await asyncio.to_thread(key_guard.wrong_type_error, client.connection(), key) from exc
        raise
    return str(holder) if holder is not None else None


async def _give_back(conn: aredis.Redis, key: str, jid: str) -> None:
    """unique._give_back: free the claim (owner-checked, best-effort; its TTL ends it otherwise)."""
    try:
        reply, _ = await aio_write.run_script(conn, "owned_delete", [key], [jid], None)
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            await asyncio.to_thread(key_guard.request, client.connection(), wrong)
    except Exception as exc:
        unique._releaser.outages.report("Unique claim", exc)
    else:
        unique._releaser.outages.recovered("Unique claim")


async def give_back_claims(conn: aredis.Redis, jobs: list[dict[str, Any]]) -> None:
    """unique.abandon: free the claims of jobs that went through the chain but were never written."""
    if client.redis_in_use():
        for job in jobs:
            if job.get("unique") == UNTIL_EXECUTED:
                await _give_back(conn, keys.unique(unique_digest(job)), str(job["jid"]))


async def on_push(job: dict[str, Any], call_next: AsyncNext, conn: aredis.Redis) -> Any:
    """job_status.on_push: decide whether the job is tracked; write "queued" before it is pushed."""
    if not client.redis_in_use():
        return await call_next(job)
    if "status" not in job and client.settings().status_all:
        job["status"] = True
    if not job_status.tracked(job):
        return await call_next(job)
    at = job.get("at")
    await _write_queued(conn, job, float(at) - time.time() if isinstance(at, int | float) else 0.0)
    try:
        pushed = await call_next(job)
    except BaseException as exc:
        if not may_be_queued(exc):
            await forget_statuses(conn, [job])
        raise
    if pushed is None:
        await forget_statuses(conn, [job])
    return pushed


async def _write_queued(conn: aredis.Redis, job: dict[str, Any], extra_ttl_s: float) -> None:
    """job_status._write_to for "queued"."""
    await write_status(conn, job, "queued", extra_ttl_s)


async def write_status(
    conn: aredis.Redis, job: dict[str, Any], state: str, extra_ttl_s: float = 0.0, **fields: str
) -> None:
    """job_status._write_to through an async client: the hash and its TTL in one round trip,
    best-effort, reported through the same outage tracker."""
    ttl_ms = int((client.settings().status_ttl_s + max(0.0, extra_ttl_s)) * 1000)
    key = keys.status(str(job["jid"]))
    mapping = {
        "status": state,
        "class": str(job.get("class")),
        "queue": str(job.get("queue")),
        "updated_at": repr(time.time()),
        **fields,
    }
    try:
        pipe = conn.pipeline(transaction=False)
        pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
        pipe.pexpire(key, max(1, ttl_ms))
        try:
            await pipe.execute()
        except redis.ResponseError as exc:
            if key_guard.is_wrong_type(exc):
                await asyncio.to_thread(key_guard.request, client.connection(), key)
            raise
    except Exception as exc:
        job_status._outages.report(job_status.COMPONENT, exc)
    else:
        job_status._outages.recovered(job_status.COMPONENT)


async def forget_statuses(conn: aredis.Redis, jobs: list[dict[str, Any]]) -> None:
    """job_status.abandon: forget "queued" for tracked jobs that were never written."""
    names = [keys.status(str(job["jid"])) for job in jobs if job_status.tracked(job)]
    if not names or not client.redis_in_use():
        return
    try:
        await conn.delete(*names)
    except Exception as exc:
        job_status._outages.report(job_status.COMPONENT, exc)


# Each sync built-in that talks to Redis, with its port and the abandon hook the port stands in for.
PORTS: dict[Callable[..., Any], AsyncMiddleware] = {unique.claim: claim, job_status.on_push: on_push}
PORTED_ABANDON_HOOKS = (unique.abandon, job_status.abandon)
