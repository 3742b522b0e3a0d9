"""The places a job can wait in, as the job search (ops/locate.py) and the header search
(ops/search.py) name them in their cursors (and so in the Web UI's "continue" links).

One-slot layout: "retry", "scheduled", "dead", and "queue:<name>" (unchanged, so old links work).
Sharded layout (store/shards.py): every queue partition holds its own three sets and queue list, so
a place is one partition's: "<retry|scheduled|dead|queue>:<queue>:<index>". A queue name holds no
':' (queue_names.py), so the text splits back unambiguously, and a one-slot name never has three
parts. The job search reads a partition's places in one script call (they share its slot), so the
sharded order lists the places partition by partition.
"""

from __future__ import annotations

import redis

from cogworker.ops import set_fanout
from cogworker.store import keys, shards
from cogworker.store.shards import Partition

SET_PLACES = ("retry", "scheduled", "dead")
QUEUE_PLACE = "queue:"
_QUEUE_KIND = "queue"


def of_partition(logical: str, partition: Partition) -> str:
    """The sharded place of `logical` ("retry", ..., or "queue:<name>") in `partition`."""
    kind = logical if logical in SET_PLACES else _QUEUE_KIND
    return f"{kind}:{partition.queue}:{partition.index}"


def split(place: str) -> tuple[str, Partition | None]:
    """(the one-slot place name, the partition) of `place`; the partition is None for a one-slot
    place."""
    parts = place.split(":")
    if len(parts) == 3 and parts[2].isdigit() and (parts[0] in SET_PLACES or parts[0] == _QUEUE_KIND):
        kind, queue, index = parts
        logical = kind if kind in SET_PLACES else QUEUE_PLACE + queue
        return logical, Partition(queue, int(index))
    return place, None


def is_set(place: str) -> bool:
    return split(place)[0] in SET_PLACES


def queue_of(place: str) -> str | None:
    """The queue a queue place is (None for a set's)."""
    logical = split(place)[0]
    return logical[len(QUEUE_PLACE) :] if logical.startswith(QUEUE_PLACE) else None


def key(place: str) -> str:
    logical, partition = split(place)
    if partition is not None:
        return shards.job_sets(partition)[logical] if logical in SET_PLACES else shards.queue_key(partition)
    return keys.job_sets()[logical] if logical in SET_PLACES else keys.queue(logical[len(QUEUE_PLACE) :])


def sharded_order(logical_order: list[str], partitions: list[Partition]) -> list[str]:
    """`logical_order` made of every partition's places, partition by partition: the partitions of
    the queues in the order the logical order names them, each partition's places in that order."""
    ranked = {q: n for n, q in enumerate(queue_of(p) for p in logical_order) if q is not None}
    ordered = sorted(partitions, key=lambda p: (ranked.get(p.queue, len(ranked)), p))
    return [
        of_partition(logical, p)
        for p in ordered
        for logical in logical_order
        if logical in SET_PLACES or logical == QUEUE_PLACE + p.queue
    ]


def run_end(order: list[str], start: int) -> int:
    """One past the last place from `start` in the same slot: the places one script call reads (every
    place, in the one-slot layout)."""
    partition = split(order[start])[1]
    if partition is None:
        return len(order)
    end = start + 1
    while end < len(order) and split(order[end])[1] == partition:
        end += 1
    return end


def lengths(client: redis.Redis, order: list[str]) -> dict[str, int]:
    """Each place's length; a key of the wrong type counts as empty. One round trip in the one-slot
    layout; a fan-out over the partitions in the sharded one."""
    parts = list(dict.fromkeys(p for p in (split(place)[1] for place in order) if p is not None))
    if not parts:
        pipe = client.pipeline(transaction=False)
        for place in order:
            (pipe.zcard if is_set(place) else pipe.llen)(key(place))
        replies = pipe.execute(raise_on_error=False)
        return {p: n if isinstance(n, int) else 0 for p, n in zip(order, replies, strict=True)}
    by_partition: dict[Partition, list[str]] = {}
    for place in order:
        partition = split(place)[1]
        assert partition is not None
        by_partition.setdefault(partition, []).append(place)

    def build(pipe: redis.client.Pipeline, p: Partition) -> None:
        for place in by_partition[p]:
            (pipe.zcard if is_set(place) else pipe.llen)(key(place))

    replies = set_fanout.fan_out(client, parts, build, raise_on_error=False)
    found: dict[str, int] = {}
    for p, answers in zip(parts, replies, strict=True):
        for place, n in zip(by_partition[p], answers, strict=True):
            found[place] = n if isinstance(n, int) else 0
    return {place: found[place] for place in order}
