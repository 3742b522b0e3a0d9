"""Which queue partition a pushed job goes to, in the sharded layout (COGWORKER_CLUSTER_SHARDING=queues).

**Spread.** A job goes to partition `crc32(jid) % n` of its queue, n being this process's configured
count for the queue (`shards.push_partitions`). jids are random (payload.new_jid), so a queue's pushes
spread evenly over its partitions without any state shared between processes or threads, and a
forked child does not start where its siblings do (a per-process round robin would send every
freshly forked process's first push to the same partition). Above all the choice is a function of
the jid: the same payload sent again (`job.send(payload)` after a PushOutcomeUnknown) goes to the
same partition, whose `pushed:<jid>` marker makes no second copy. That holds while the sender's
partition count for the queue is the same; after COGWORKER_QUEUE_PARTITIONS changes, a payload sent
again within the marker's two minutes may land in another partition and be queued twice.

**A push spanning partitions** (push_bulk, an awaitable bulk push) is split into one group per
partition, each written by one push_batch.lua call on that partition's client: atomic per partition,
not across them. The groups are written in partition order and the first that fails stops the push:
the groups before it are written, the failed group's jobs are written or not as its outcome check
finds (api/push_outcome.py, asked on that partition's client), and the groups after it are not sent.
The error raised carries a note with how many jobs were written before it. Sending the same payloads
again writes only the missing ones: each partition's markers skip the jids it already holds.

**First push of a queue** in a process records the queue's partition count in the home slot
(`fanout.record`: the home registry and a grow-only count, idempotent), so readers cover every partition
this process may push to, and a paused queue's new partitions are paused too; remembered per process
afterwards.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from cogworker.store import fanout, shards

Group = tuple[shards.Partition, list[dict[str, Any]]]

_lock = threading.Lock()
# (deployment prefix, queue, partition count) recorded in the home slot by this process.
_recorded: set[tuple[str, str, int]] = set()


def partition_of(job: dict[str, Any]) -> shards.Partition:
    """The partition `job` is written to: a function of its jid (see the module's doc)."""
    choices = shards.push_partitions(str(job["queue"]))
    if len(choices) == 1:
        return choices[0]
    jid = str(job["jid"]).encode("utf-8", "surrogateescape")
    return choices[zlib.crc32(jid) % len(choices)]


def split(jobs: Iterable[dict[str, Any]]) -> list[Group]:
    """`jobs` grouped by partition, in partition order (queue name, then index); each group keeps
    the jobs' order, so a partition's list gets them in the order pushed."""
    groups: dict[shards.Partition, list[dict[str, Any]]] = {}
    for job in jobs:
        groups.setdefault(partition_of(job), []).append(job)
    return sorted(groups.items(), key=lambda group: group[0])


def to_record(jobs: Iterable[dict[str, Any]]) -> list[str]:
    """The queues of `jobs` this process has not recorded yet (their partition count)."""
    prefix = shards.deployment_prefix()
    names = dict.fromkeys(str(job["queue"]) for job in jobs)
    return [name for name in names if (prefix, name, shards.configured_count(name)) not in _recorded]


def record(home: redis.Redis, queue_names: Sequence[str]) -> None:
    """Record each queue's partition count and listing in the home slot, then remember it. A failure
    raises before any job of the push is sent (the push fails as if Redis was away, nothing written)."""
    prefix = shards.deployment_prefix()
    for name in queue_names:
        fanout.record(home, name)
        with _lock:
            _recorded.add((prefix, name, shards.configured_count(name)))


def forget_recorded() -> None:
    """Forget what was recorded (tests flushing the cluster between pushes of one process)."""
    with _lock:
        _recorded.clear()


def note_written(exc: BaseException, written: Sequence[dict[str, Any]]) -> None:
    """Tell the caller of a push spanning partitions which of its jobs were written before `exc`."""
    if written:
        jids = [str(job["jid"]) for job in written]
        shown = ", ".join(jids[:5]) + (f" and {len(jids) - 5} more" if len(jids) > 5 else "")
        exc.add_note(
            f"{len(jids)} job(s) of this push were written to other queue partitions before it failed "
            f"({shown}); sending the same payloads again (job.send) makes no second copy of them"
        )


def never_sent(groups: Sequence[Group]) -> list[dict[str, Any]]:
    """The jobs of the groups after a failed one: not sent, so not written."""
    return [job for _, jobs in groups for job in jobs]
