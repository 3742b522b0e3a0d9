"""The plain records of ops/queues.py, shared with its sharded half (ops/queues_sharded.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cogworker import codec
from cogworker.api import timestamps


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    size: int
    # Age of the job popped next (the right end: the oldest), from its `enqueued_at`. None when
    # the queue is empty or that job is unreadable.
    latency_s: float | None
    paused: bool


def latency_of(raw: str | None, now: float) -> float | None:
    """How long the job `raw` has been waiting: now minus its `enqueued_at` (else `created_at`)."""
    if raw is None:
        return None
    job = codec.loads_dict(raw)
    if job is None:
        return None
    # Seconds or (Sidekiq 8) milliseconds: api/timestamps.py.
    stamp = timestamps.epoch_s(job.get("enqueued_at", job.get("created_at")))
    if stamp is None:
        return None
    return max(0.0, now - stamp)


# How far from the index a job was shown at `delete_job` looks for it: the queue moves while the
# operator reads the page (pushes at the left shift every index up, pops at the right don't).
DELETE_WINDOW = 50


@dataclass(frozen=True, slots=True)
class QueuedJob:
    index: int  # its LRANGE index when read (0: the newest, pushed last)
    raw: str  # the payload text exactly as stored: what LREM needs to remove this one job
    jid: str | None
    job: str | None  # the job's registered name; None when the payload is unreadable
    args: list[Any]
    enqueued_at: float | None
    # The queue partition it is in (store/shards.py; always 0 outside the sharded layout): its index
    # is in that partition's list.
    partition: int = 0


def queued_job(index: int, raw: str, partition: int = 0) -> QueuedJob:
    job = codec.loads_dict(raw) or {}
    jid, name, args = job.get("jid"), job.get("class"), job.get("args")
    stamp = job.get("enqueued_at", job.get("created_at"))
    return QueuedJob(
        index=index,
        raw=raw,
        jid=jid if isinstance(jid, str) and jid else None,
        job=name if isinstance(name, str) else None,
        args=args if isinstance(args, list) else [],
        enqueued_at=timestamps.epoch_s(stamp),
        partition=partition,
    )
