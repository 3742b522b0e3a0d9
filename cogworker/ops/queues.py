"""Queues: their sizes and latencies, pausing and resuming them, clearing one."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.store import keys


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    size: int
    # Age of the job popped next (the right end: the oldest), from its `enqueued_at`. None when
    # the queue is empty or that job is unreadable.
    latency_s: float | None
    paused: bool


def known_queues(client: redis.Redis, extra: Iterable[str] = ()) -> list[str]:
    """Every queue ever pushed to, every paused queue, and `extra` (queues processes say they read)."""
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.QUEUES)
    pipe.smembers(keys.PAUSED)
    pushed, paused = pipe.execute()
    return sorted({str(n) for n in pushed} | {str(n) for n in paused} | set(extra))


def paused_queues(client: redis.Redis) -> set[str]:
    return {str(n) for n in cast(set[str], client.smembers(keys.PAUSED))}


def latency_of(raw: str | None, now: float) -> float | None:
    """How long the job `raw` has been waiting: now minus its `enqueued_at` (else `created_at`)."""
    if raw is None:
        return None
    job = codec.loads_dict(raw)
    if job is None:
        return None
    stamp: Any = job.get("enqueued_at", job.get("created_at"))
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return None
    return max(0.0, now - float(stamp))


def queue_infos(
    client: redis.Redis, names: Iterable[str] | None = None, now: float | None = None
) -> list[QueueInfo]:
    """Size, latency and paused flag of each queue (default: every known queue), in one round trip."""
    chosen = sorted(set(names)) if names is not None else known_queues(client)
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.PAUSED)
    for name in chosen:
        pipe.llen(keys.queue(name))
        pipe.lindex(keys.queue(name), -1)
    replies = pipe.execute()
    paused = {str(n) for n in replies[0]}
    infos = []
    for index, name in enumerate(chosen):
        size, oldest = replies[1 + 2 * index], replies[2 + 2 * index]
        infos.append(QueueInfo(name, int(size), latency_of(oldest, now), name in paused))
    return infos


def pause(client: redis.Redis, name: str) -> bool:
    """Fetchers skip a paused queue. True when it was not paused before."""
    return bool(client.sadd(keys.PAUSED, name))


def resume(client: redis.Redis, name: str) -> bool:
    """True when it was paused before. Idle workers reading the queue are woken to fetch at once."""
    pipe = client.pipeline(transaction=False)
    pipe.srem(keys.PAUSED, name)
    pipe.publish(keys.WAKE_CHANNEL, name)
    removed, _woken = pipe.execute()
    return bool(removed)


def size(client: redis.Redis, name: str) -> int:
    return client.llen(keys.queue(name))


def clear(client: redis.Redis, name: str) -> int:
    """Delete every job waiting in the queue and forget the queue name; returns how many jobs went.

    The name leaves `cogworker:queues` too (the next push lists it again). Jobs already fetched sit
    on in-progress lists and are not touched."""
    # LTRIM, not DEL: a transaction runs every command after a failed one, and a DEL would delete a
    # key of another type that the LLEN refused (LTRIM refuses it too; the key guard moves it aside).
    pipe = client.pipeline(transaction=True)
    pipe.llen(keys.queue(name))
    pipe.ltrim(keys.queue(name), 1, 0)
    pipe.srem(keys.QUEUES, name)
    removed, _, _ = pipe.execute()
    return int(removed)
