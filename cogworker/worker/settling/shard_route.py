"""Where a settle goes in the sharded layout (store/shards.py): the job's own partition.

A job is filed in its partition's retry, dead or schedule set, counted in its partition's counters and
its death notice pushed on its partition's deaths list, by settle.lua on that partition's client, so
the filing and the removal from the in-progress list stay one atomic step in one slot. The partition is
the one it was fetched from (placements.py), carried from the settle to a kept filing by the in-progress
list's key (`shards.partition_of_key`).

A filing names its set with the one-slot names (`keys.RETRY`, `keys.DEAD`, `keys.SCHEDULE`: api/retry.py,
api/limit_jobs.py), so `Filing.dead` and every reader of a filing stay as they are; `set_of` turns
that name into the partition's set at the script call.

Two families of this layout are named here rather than in store/shards.py, as only the settle path
uses them: each partition's `unsettled` list (handover.py: a stopping process's filings, handed over in
the partition's slot with the removal from its list) and its quarantine keys (an unusable record from
that list, set aside in the same MULTI as its removal).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker import codec
from cogworker.store import keys, shards
from cogworker.store.shard_clients import ShardClients
from cogworker.store.shards import Partition
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements


def unsettled(p: Partition) -> str:
    return p.prefix + "unsettled" if shards.is_sharded() else keys.UNSETTLED


def quarantine(p: Partition, what: str) -> str:
    return f"{p.prefix}quarantine:{what}" if shards.is_sharded() else keys.quarantine(what)


def set_of(set_key: str, p: Partition) -> str:
    """The partition's set for a filing's one-slot set name (keys.RETRY/DEAD/SCHEDULE)."""
    if set_key == keys.RETRY:
        return shards.retry(p)
    if set_key == keys.DEAD:
        return shards.dead(p)
    if set_key == keys.SCHEDULE:
        return shards.schedule(p)
    return set_key  # already a partition's (a handed-over record names its set so)


def payload_partition(raw: str) -> Partition:
    """A job's partition when nothing recorded it (it was not fetched here): its queue's first."""
    job = codec.loads_dict(raw) or {}
    queue = job.get("queue")
    return Partition(queue if isinstance(queue, str) and queue else "default")


@dataclass(frozen=True, slots=True)
class ShardRoute:
    """What a sharded worker process's settler needs to send a settle to its job's partition."""

    clients: ShardClients
    identity: str
    placements: Placements
    health: PartitionHealth

    def list_of(self, p: Partition) -> str:
        return shards.in_progress(p, self.identity)

    def partition_of(self, listed: str, raw: str) -> Partition:
        return shards.partition_of_key(listed) or payload_partition(raw)

    def client(self, p: Partition) -> redis.Redis:
        return self.clients.of(p)


# The process's route, for what settles outside the settler (the poller's filing of handed-over
# records, filing.file_unsettled): set by the launcher, None outside the sharded layout.
_current: ShardRoute | None = None


def use(route: ShardRoute | None) -> None:
    global _current
    _current = route


def current() -> ShardRoute | None:
    return _current
