"""ops/queues.py's reads and actions in the sharded layout (COGWORKER_CLUSTER_SHARDING=queues): a queue
is the sum of its partitions (store/shards.py), each in a slot of its own, read in one fan-out.

- size: the partitions' lengths summed; latency: the oldest job popped next of any partition (the
  longest any job of the queue has waited at a right end); paused: any partition's flag is set (a
  fetcher skips that partition), which a pause interrupted half way also shows, so it can be sent again;
- pause and resume write every partition's flag (`shards.paused(p)`, a set holding the queue's name, as
  the one-slot layout's), and the home slot's paused set too: that one is the intent, which lists the
  queue while it is paused and which a pusher raising the partition count can copy to the new
  partitions. SADD and SREM, so sending either again after a lost reply changes nothing;
- a page of jobs reads the partitions one after another (partition 0's jobs, then 1's...), each job
  with its partition and its index in that partition's list, which the deletion of one job needs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

import redis

from cogworker.ops import NotFound
from cogworker.ops.queue_types import DELETE_WINDOW, QueuedJob, QueueInfo, latency_of, queued_job
from cogworker.store import fanout, keys, shards


def _partitions(client: redis.Redis, names: Iterable[str]) -> list[shards.Partition]:
    _, counts = fanout.recorded(client)
    return shards.every_partition(sorted(set(names)), counts)


def known_queues(client: redis.Redis, extra: Iterable[str] = ()) -> list[str]:
    names, _ = fanout.recorded(client)
    return sorted(set(names) | set(extra))


def paused_queues(client: redis.Redis) -> set[str]:
    found = fanout.pipelined(
        client,
        fanout.known_partitions(client),
        lambda pipe, p: pipe.sismember(shards.paused(p), p.queue),
    )
    return {p.queue for p, (flag,) in found.items() if flag}


def queue_infos(client: redis.Redis, names: Iterable[str] | None, now: float | None) -> list[QueueInfo]:
    chosen = sorted(set(names)) if names is not None else known_queues(client)
    now = time.time() if now is None else now

    def read(pipe: Any, p: shards.Partition) -> None:
        pipe.llen(shards.queue_key(p))
        pipe.lindex(shards.queue_key(p), -1)
        pipe.sismember(shards.paused(p), p.queue)

    replies = fanout.pipelined(client, _partitions(client, chosen), read)
    sizes = dict.fromkeys(chosen, 0)
    latencies: dict[str, float | None] = dict.fromkeys(chosen)
    paused = dict.fromkeys(chosen, False)
    for p, (size, oldest, flag) in replies.items():
        sizes[p.queue] += int(size)
        age = latency_of(oldest, now)
        if age is not None:
            latencies[p.queue] = max(age, latencies[p.queue] or 0.0)
        paused[p.queue] = paused[p.queue] or bool(flag)
    return [QueueInfo(name, sizes[name], latencies[name], paused[name]) for name in chosen]


def pause(client: redis.Redis, name: str) -> bool:
    """True when some partition was not paused before (a pause sent again changes nothing)."""
    client.sadd(keys.PAUSED, name)
    found = fanout.pipelined(
        client, _partitions(client, [name]), lambda pipe, p: pipe.sadd(shards.paused(p), name)
    )
    return any(added for (added,) in found.values())


def resume(client: redis.Redis, name: str) -> bool:
    """True when some partition was paused before; each partition's idle fetchers are woken."""

    def clear_flag(pipe: Any, p: shards.Partition) -> None:
        pipe.srem(shards.paused(p), name)
        pipe.publish(shards.wake_channel(p), name)

    # The partitions first: the home intent goes last, so a resume cut short still lists the queue
    # as paused where the next resume finds it.
    found = fanout.pipelined(client, _partitions(client, [name]), clear_flag)
    removed = any(flag for flag, _ in found.values())
    return bool(client.srem(keys.PAUSED, name)) or removed


def size(client: redis.Redis, name: str) -> int:
    def lengths(pipe: Any, p: shards.Partition) -> None:
        pipe.llen(shards.queue_key(p))
        pipe.llen(shards.suspects(p))

    found = fanout.pipelined(client, _partitions(client, [name]), lengths)
    return sum(int(n) for replies in found.values() for n in replies)


def clear(client: redis.Redis, name: str) -> int:
    """Every partition's waiting jobs and suspects, each partition in one MULTI of its own slot."""

    def empty(pipe: Any, p: shards.Partition) -> None:
        for key in (shards.queue_key(p), shards.suspects(p)):
            pipe.llen(key)
            pipe.ltrim(key, 1, 0)

    found = fanout.pipelined(client, _partitions(client, [name]), empty, transaction=True)
    client.srem(keys.QUEUES, name)
    return sum(int(queued) + int(suspects) for queued, _, suspects, _ in found.values())


def jobs_page(client: redis.Redis, name: str, start: int, count: int, next_first: bool) -> list[QueuedJob]:
    """`count` jobs from position `start` of the partitions read one after another: one LLEN per
    partition, then one LRANGE of each partition the page reaches."""
    if count <= 0:
        return []
    start = max(0, start)
    parts = _partitions(client, [name])
    lengths = fanout.pipelined(client, parts, lambda pipe, p: pipe.llen(shards.queue_key(p)))
    slices: dict[shards.Partition, tuple[int, int]] = {}  # partition -> (first position in it, how many)
    before = 0
    for p in parts:
        length = int(lengths[p][0])
        first = max(0, start - before)
        wanted = min(length - first, start + count - before - first)
        if wanted > 0:
            slices[p] = (first, wanted)
        before += length

    def read(pipe: Any, p: shards.Partition) -> None:
        first, wanted = slices[p]
        if next_first:
            pipe.lrange(shards.queue_key(p), -(first + wanted), -(first + 1))
        else:
            pipe.lrange(shards.queue_key(p), first, first + wanted - 1)

    raws = fanout.pipelined(client, list(slices), read)
    jobs: list[QueuedJob] = []
    for p in parts:
        if p not in slices:
            continue
        first, _ = slices[p]
        (found,) = raws[p]
        if not next_first:
            jobs += [queued_job(first + i, str(raw), p.index) for i, raw in enumerate(found)]
            continue
        # As the one-slot page: the rightmost (the partition's next to run) first, each job with its
        # index from the left, which the partition's length read above gives.
        last = int(lengths[p][0]) - 1 - first
        jobs += [queued_job(last - i, str(raw), p.index) for i, raw in enumerate(reversed(found))]
    return jobs[:count]


def delete_job(client: redis.Redis, name: str, jid: str, near_index: int, partition: int) -> QueuedJob:
    p = shards.Partition(name, max(0, partition))
    owner = fanout.clients_of(client).of(p)
    key = shards.queue_key(p)
    first = max(0, near_index - DELETE_WINDOW)
    raws = cast(list[str], owner.lrange(key, first, max(0, near_index) + DELETE_WINDOW))
    found = [queued_job(first + i, str(raw), p.index) for i, raw in enumerate(raws)]
    matches = [j for j in found if j.jid == jid]
    if matches:
        job = min(matches, key=lambda j: abs(j.index - near_index))
        if owner.lrem(key, 1, job.raw):
            return job
    raise NotFound(f"job {jid} is no longer in queue {name} (it ran, moved or was deleted)")
