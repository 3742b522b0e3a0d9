"""What a requeue of an in-progress list is given (ListKeys) and answers (RequeueResult), shared by
recovery.py and its sharded half (sharded_recovery.py) without either importing the other's module."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from cogworker.api.payload import DEFAULT_QUEUE
from cogworker.store import shards
from cogworker.store.scripts import Scripts


class PartitionsUnreachable(redis.ConnectionError):
    """Sharded: some partitions' lists could not be requeued (their master did not answer); the others
    were. `result` is what was done."""

    def __init__(self, message: str, result: RequeueResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class RequeueResult:
    moved: int = 0
    failed: int = 0
    alive: bool = False
    unlisted: list[str] = field(default_factory=list)
    buried: list[str] = field(default_factory=list)
    wrong_type: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # raw jobs not requeued: cogworker.cancel asked
    suspects: int = 0  # of `moved`: put on their queues' suspects lists, to run alone
    seen: int = 0  # jobs the script found on the list


@dataclass(frozen=True, slots=True)
class ListKeys:
    """One in-progress list and the fixed keys requeue.lua is given with it: the one-slot layout's, or
    (sharded) those of the list's partition, where the home slot's presence, beats, registry and
    cancels can't be reached (sharded_recovery.py names stand-ins and checks death in the home slot)."""

    client: redis.Redis
    scripts: Scripts
    in_progress: str
    presence: str
    last_beat: str
    dead: str
    registry: str
    live_queues: str
    cancels: str
    default_queue: str = DEFAULT_QUEUE
    partition: shards.Partition | None = None
