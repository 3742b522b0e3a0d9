"""Queues: their sizes and latencies, pausing and resuming them, clearing one, and one page of a
queue's jobs with the deletion of one of them.

In the sharded layout a queue is the sum of its partitions: each function hands over to
ops/queues_sharded.py, and the one-slot and single-Redis paths below keep their commands."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import redis

from cogworker.ops import NotFound
from cogworker.ops import queues_sharded as sharded
from cogworker.ops.queue_types import DELETE_WINDOW, QueuedJob, QueueInfo, latency_of, queued_job
from cogworker.store import keys, shards

# Their home is ops/queue_types.py; every reader names them through this module.
__all__ = ["DELETE_WINDOW", "QueueInfo", "QueuedJob", "latency_of", "queued_job"]


@dataclass(frozen=True, slots=True)
class Readers:
    """The live processes that list a queue in their COGWORKER_QUEUES (ops/processes.py
    `queue_readers`)."""

    processes: int = 0
    # Of those, the ones fetching: neither quiet nor stopping. A quiet fleet still "reads" its queues
    # by configuration, but takes nothing from them.
    fetching: int = 0


@dataclass(frozen=True, slots=True)
class ServedQueue:
    """A queue with the live processes that read it: what the Queues page and the dashboard show."""

    info: QueueInfo
    readers: Readers

    @property
    def unserved(self) -> bool:
        """Jobs wait in it and no live process fetches from it: they won't run until one does. A
        paused queue is not unserved: nothing is meant to fetch from it."""
        return self.info.size > 0 and not self.info.paused and self.readers.fetching == 0

    @property
    def state(self) -> str:
        """ "paused", "unserved", "active" (a fetching process reads it) or "unread" (empty, and no
        fetching process reads it: harmless until a job is pushed)."""
        if self.info.paused:
            return "paused"
        if self.unserved:
            return "unserved"
        return "active" if self.readers.fetching else "unread"


def served(infos: Iterable[QueueInfo], readers: Mapping[str, Readers]) -> list[ServedQueue]:
    return [ServedQueue(info, readers.get(info.name, Readers())) for info in infos]


def known_queues(client: redis.Redis, extra: Iterable[str] = ()) -> list[str]:
    """Every queue ever pushed to, every paused queue, and `extra` (queues processes say they read)."""
    if shards.is_sharded():
        return sharded.known_queues(client, extra)
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.QUEUES)
    pipe.smembers(keys.PAUSED)
    pushed, paused = pipe.execute()
    return sorted({str(n) for n in pushed} | {str(n) for n in paused} | set(extra))


def paused_queues(client: redis.Redis) -> set[str]:
    if shards.is_sharded():
        return sharded.paused_queues(client)
    return {str(n) for n in cast(set[str], client.smembers(keys.PAUSED))}


def queue_infos(
    client: redis.Redis, names: Iterable[str] | None = None, now: float | None = None
) -> list[QueueInfo]:
    """Size, latency and paused flag of each queue (default: every known queue), in one round trip."""
    if shards.is_sharded():
        return sharded.queue_infos(client, names, now)
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
    if shards.is_sharded():
        return sharded.pause(client, name)
    return bool(client.sadd(keys.PAUSED, name))


def resume(client: redis.Redis, name: str) -> bool:
    """True when it was paused before. Idle workers reading the queue are woken to fetch at once."""
    if shards.is_sharded():
        return sharded.resume(client, name)
    pipe = client.pipeline(transaction=False)
    pipe.srem(keys.PAUSED, name)
    pipe.publish(keys.WAKE_CHANNEL, name)
    removed, _woken = pipe.execute()
    return bool(removed)


def size(client: redis.Redis, name: str) -> int:
    """Jobs waiting in the queue, with those on its suspects list (worker/recovering/recovery.py)."""
    if shards.is_sharded():
        return sharded.size(client, name)
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.queue(name))
    pipe.llen(keys.suspects(name))
    return sum(int(n) for n in pipe.execute())


def clear(client: redis.Redis, name: str) -> int:
    """Delete every job waiting in the queue (its suspects too) and forget the queue name; returns
    how many jobs went.

    The name leaves `cogworker:queues` too (the next push lists it again). Jobs already fetched sit
    on in-progress lists and are not touched."""
    if shards.is_sharded():
        return sharded.clear(client, name)
    # LTRIM, not DEL: a transaction runs every command after a failed one, and a DEL would delete a
    # key of another type that the LLEN refused (LTRIM refuses it too; the key guard moves it aside).
    pipe = client.pipeline(transaction=True)
    for key in (keys.queue(name), keys.suspects(name)):
        pipe.llen(key)
        pipe.ltrim(key, 1, 0)
    pipe.srem(keys.QUEUES, name)
    queued, _, suspects, _, _ = pipe.execute()
    return int(queued) + int(suspects)


def jobs_page(
    client: redis.Redis, name: str, start: int, count: int, next_first: bool = False
) -> list[QueuedJob]:
    """`count` jobs of the queue from position `start`, read as one LRANGE slice: the cost doesn't
    depend on the queue's length.

    Newest first (the default) reads from the left end, where pushes land (index 0: the newest).
    `next_first` reads from the right end, which every fetch pops first (fetch.lua's LMOVE ...
    RIGHT, basic fetch's BRPOP): the first job listed is the one a worker takes next. Each job keeps
    its index from the left, which `delete_job` needs; for the right end that index is the queue's
    length minus the position, so the length is read in the same MULTI.

    In the sharded layout the partitions are read one after another (ops/queues_sharded.py)."""
    if shards.is_sharded():
        return sharded.jobs_page(client, name, start, count, next_first)
    if count <= 0:
        return []
    start = max(0, start)
    key = keys.queue(name)
    if not next_first:
        raws = cast(list[str], client.lrange(key, start, start + count - 1))
        return [queued_job(start + offset, str(raw)) for offset, raw in enumerate(raws)]
    pipe = client.pipeline(transaction=True)
    pipe.llen(key)
    pipe.lrange(key, -(start + count), -(start + 1))
    length, raws = pipe.execute()
    # LRANGE gives the slice left to right; the rightmost (the next to run) is listed first.
    first = int(length) - 1 - start
    return [queued_job(first - offset, str(raw)) for offset, raw in enumerate(reversed(raws))]


def delete_job(client: redis.Redis, name: str, jid: str, near_index: int, partition: int = 0) -> QueuedJob:
    """Delete the job `jid` from the queue, looking for it only within DELETE_WINDOW of the index it
    was shown at (never a scan of the whole queue), and removing exactly that payload (LREM 1).
    NotFound when it isn't there: it ran, moved or was deleted meanwhile. `partition`: the queue
    partition it was shown in (the sharded layout's; 0 otherwise)."""
    if shards.is_sharded():
        return sharded.delete_job(client, name, jid, near_index, partition)
    first = max(0, near_index - DELETE_WINDOW)
    raws = cast(list[str], client.lrange(keys.queue(name), first, max(0, near_index) + DELETE_WINDOW))
    matches = [j for j in (queued_job(first + i, str(raw)) for i, raw in enumerate(raws)) if j.jid == jid]
    if matches:
        found = min(matches, key=lambda j: abs(j.index - near_index))
        # LREM compares the whole text: another job can't be taken for this one. It returns 0 when a
        # fetcher popped the job between the LRANGE and now.
        if client.lrem(keys.queue(name), 1, found.raw):
            return found
    raise NotFound(f"job {jid} is no longer in queue {name} (it ran, moved or was deleted)")
