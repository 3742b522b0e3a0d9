"""Worker processes: who is alive and what they are running, remote commands, orphan recovery.

A process is live while its presence hash (`cogworker:process:<identity>`, refreshed on every beat
with the presence TTL) exists. Remote commands go onto `cogworker:signals:<identity>`, which the
process reads on its next beat (heartbeat.lua).

In the Sidekiq mode the shared `processes` set also holds Sidekiq's processes: listed beside
cogworker's, marked as Ruby, never pruned (ops/ruby_processes.py).

In the sharded layout (store/shards.py) a process keeps one in-progress list per partition of the
queues it reads, each in its partition's slot: what it holds is their lengths summed, read in one
fan-out (store/fanout.py) after the home slot's presence hashes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.ops import NotFound, OpsError, redis_time, ruby_processes
from cogworker.ops import queues as queue_ops
from cogworker.ops.process_records import ProcessInfo as ProcessInfo
from cogworker.ops.process_records import RunningJob as RunningJob
from cogworker.ops.process_records import number, presence_fields
from cogworker.settings import Settings
from cogworker.store import fanout, keys, shards, sidekiq_keys
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts
from cogworker.worker.loops.heartbeat import REMOTE_COMMANDS
from cogworker.worker.recovering.recovery import Recovery

# A command for a process that died before reading it must not wait for a later process forever.
SIGNAL_TTL_S = 60


@dataclass(frozen=True, slots=True)
class OrphanedList:
    """An in-progress list whose owner is not live: recovery requeues it once the owner has been
    silent for COGWORKER_ORPHAN_THRESHOLD_S."""

    identity: str
    size: int
    last_beat_age_s: float | None


def _running_job(thread: str, raw: str, now: float) -> RunningJob:
    """One work-hash entry: the bounded summary a beat writes (heartbeat.summarize), or -- from a
    worker of an older version -- the whole payload under "payload"."""
    item = codec.loads_dict(raw) or {}
    job = (codec.loads_dict(str(item.get("payload") or "")) or {}) if "payload" in item else item
    run_at = number(item.get("run_at"))
    args = job.get("args")
    return RunningJob(
        thread=thread,
        queue=str(item.get("queue") or job.get("queue") or ""),
        jid=str(job["jid"]) if job.get("jid") else None,
        job=str(job["class"]) if isinstance(job.get("class"), str) else None,
        args=args if isinstance(args, list) else [],
        run_at=run_at,
        running_for_s=max(0.0, now - run_at) if run_at is not None else None,
    )


def _process_info(
    identity: str, presence: dict[str, str], work: dict[str, str], in_progress: int, now: float, clock: float
) -> ProcessInfo:
    return ProcessInfo(
        **presence_fields(identity, presence, now, clock),
        rss_bytes=int(number(presence.get("rss")) or 0),
        quiet=presence.get("quiet") == "1",
        in_progress=in_progress,
        running=sorted(
            (_running_job(thread, raw, now) for thread, raw in work.items()),
            key=lambda r: (r.run_at or 0.0, r.thread),
        ),
        stopping=presence.get("stopping") == "1",
    )


def processes(client: redis.Redis, now: float | None = None) -> list[ProcessInfo]:
    """Every live process, by hostname then pid."""
    now = time.time() if now is None else now
    clock = redis_time(client)
    identities = sorted(str(i) for i in cast(set[str], client.smembers(keys.PROCESSES)))
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        pipe.hgetall(keys.process(identity))
        pipe.hgetall(keys.work(identity))
        pipe.llen(keys.in_progress(identity))
    replies = pipe.execute()
    found = []
    for index, identity in enumerate(identities):
        presence, work, in_progress = replies[3 * index : 3 * index + 3]
        if presence:  # no presence hash: not live (its TTL ran out, or it stopped)
            found.append(_process_info(identity, presence, work, int(in_progress), now, clock))
    if sidekiq_keys.enabled():
        found += _ruby(client, [i for i in identities if i not in {p.identity for p in found}], now, clock)
    if shards.is_sharded():
        found = _partition_holdings(client, found)
    return sorted(found, key=lambda p: (p.hostname, p.pid or 0, p.identity))


def _ruby(client: redis.Redis, identities: list[str], now: float, clock: float) -> list[ProcessInfo]:
    """The Sidekiq mode: which of the members with no cogworker presence are live Ruby processes."""
    if not identities:
        return []
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        ruby_processes.read_sidekiq(pipe, identity)
    replies = pipe.execute()
    found = []
    for index, identity in enumerate(identities):
        presence, busy_jobs = replies[2 * index : 2 * index + 2]
        if ruby_processes.is_ruby(presence):
            found.append(ruby_processes.ruby_process(identity, presence, busy_jobs, now, clock))
    return found


def _partition_holdings(client: redis.Redis, live: list[ProcessInfo]) -> list[ProcessInfo]:
    """Each process with `in_progress` summed over its lists in every partition of the queues it
    reads (max of recorded and configured partitions, as its fetcher covers them)."""
    _, counts = fanout.recorded(client)
    readers: dict[shards.Partition, list[str]] = {}
    for process in live:
        for partition in shards.every_partition(list(dict.fromkeys(process.queues)), counts):
            readers.setdefault(partition, []).append(process.identity)

    def lengths(pipe: Any, p: shards.Partition) -> None:
        for identity in readers[p]:
            pipe.llen(shards.in_progress(p, identity))

    held = dict.fromkeys((p.identity for p in live), 0)
    for partition, sizes in fanout.pipelined(client, list(readers), lengths).items():
        for identity, size in zip(readers[partition], sizes, strict=True):
            held[identity] += int(size)
    return [replace(p, in_progress=p.in_progress + held[p.identity]) for p in live]


def queue_readers(live: Iterable[ProcessInfo]) -> dict[str, queue_ops.Readers]:
    """How many live processes list each queue, and how many of those fetch (not quiet or stopping).

    This reads the presence hashes (`processes`), which exist only while their process beats: exact
    now. `cogworker doctor`'s unread-queues check reads `cogworker:live-queues` instead, whose stamps
    keep a process that just died counted for the live-queue window (2 x the presence TTL)."""
    counts: dict[str, list[int]] = {}
    for process in live:
        fetching = not (process.quiet or process.stopping)
        for name in dict.fromkeys(process.queues):
            count = counts.setdefault(name, [0, 0])
            count[0] += 1
            count[1] += fetching
    return {name: queue_ops.Readers(n, f) for name, (n, f) in counts.items()}


def served_queues(
    client: redis.Redis, names: Iterable[str] | None = None, now: float | None = None
) -> list[queue_ops.ServedQueue]:
    """The queues `names` (default: every known queue, those live processes read included), each
    with its readers."""
    readers = queue_readers(processes(client, now))
    chosen = queue_ops.known_queues(client, readers) if names is None else names
    infos = queue_ops.queue_infos(client, chosen, now)
    return queue_ops.served(infos, readers)


def unserved_count(client: redis.Redis, infos: Iterable[queue_ops.QueueInfo]) -> int:
    """How many of `infos` hold jobs that no live process fetches (the dashboard's figure)."""
    readers = queue_readers(processes(client))
    return sum(q.unserved for q in queue_ops.served(infos, readers))


def orphaned_lists(client: redis.Redis, live: set[str] | None = None) -> list[OrphanedList]:
    """Non-empty in-progress lists of processes that are not live."""
    if live is None:
        live = {p.identity for p in processes(client)}
    clock = redis_time(client)
    owners = {str(i) for i in cast(set[str], client.smembers(keys.IN_PROGRESS_IDENTITIES))}
    owners |= {str(i) for i in cast(set[str], client.smembers(keys.PROCESSES))}
    candidates = sorted(owners - live)
    pipe = client.pipeline(transaction=False)
    for identity in candidates:
        pipe.llen(keys.in_progress(identity))
        pipe.hget(keys.LAST_BEAT, identity)
    replies = pipe.execute()
    held = _orphan_holdings(client, candidates) if shards.is_sharded() else {}
    found = []
    for index, identity in enumerate(candidates):
        size, beat = int(replies[2 * index]) + held.get(identity, 0), number(replies[2 * index + 1])
        if size:
            found.append(OrphanedList(identity, size, max(0.0, clock - beat) if beat is not None else None))
    return found


def _orphan_holdings(client: redis.Redis, identities: list[str]) -> dict[str, int]:
    """Jobs on each identity's in-progress lists in every known partition (sharded layout): a process
    that is gone no longer says which queues it read."""
    if not identities:
        return {}

    def lengths(pipe: Any, p: shards.Partition) -> None:
        for identity in identities:
            pipe.llen(shards.in_progress(p, identity))

    held = dict.fromkeys(identities, 0)
    for sizes in fanout.pipelined(client, fanout.known_partitions(client), lengths).values():
        for identity, size in zip(identities, sizes, strict=True):
            held[identity] += int(size)
    return held


def tell(client: redis.Redis, command: str, identities: list[str] | None = None) -> list[ProcessInfo]:
    """Send a remote command (quiet, stop, resume) to the given live processes, or to every live
    one when `identities` is None. Returns the processes told; raises NotFound for an identity
    that is not live (and tells none then).

    In the Sidekiq mode a Ruby process named here gets Sidekiq's own signal (quiet TSTP, stop TERM;
    it can't resume). "Every live one" means cogworker's only: a Ruby process quieted along with them
    could not be resumed with them."""
    if command not in REMOTE_COMMANDS:
        raise OpsError(f"unknown command {command!r}: use one of {', '.join(REMOTE_COMMANDS)}")
    live = {p.identity: p for p in processes(client)}
    if identities is None:
        targets = [p for p in live.values() if not p.is_ruby]
    else:
        missing = [i for i in identities if i not in live]
        if missing:
            raise NotFound(f"no live process {', '.join(missing)} (see `cogworker status`)")
        targets = [live[i] for i in dict.fromkeys(identities)]
    ruby = [p for p in targets if p.is_ruby]
    if ruby:
        ruby_processes.signal(client, ruby, command)
    pipe = client.pipeline(transaction=False)
    for process in targets:
        if not process.is_ruby:
            pipe.lpush(keys.signals(process.identity), command)
            pipe.expire(keys.signals(process.identity), SIGNAL_TTL_S)
    if len(targets) > len(ruby):
        pipe.execute()
    return targets


def recover_orphans(client: redis.Redis, settings: Settings) -> int:
    """What every worker's poller does each COGWORKER_ORPHAN_CHECK_INTERVAL_S, now, with the
    keyspace scan for lists no registry names. Only owners silent past the orphan threshold lose
    their jobs (the check is atomic with the requeue). Returns how many jobs were requeued."""
    scripts = Scripts(client)
    outages = Outages()
    recovery = Recovery(RedisContext(client, scripts, settings, outages, Locks(client, scripts, outages)))
    return recovery.recover_orphans(scan=True)
