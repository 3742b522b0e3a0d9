"""One retry, scheduled or dead set made of every queue partition's (the sharded layout; see
ops/set_fanout.py): listed in one order, paged by position, read on from a position.

The order is the one-slot set's (by score, ascending or descending) with ties between partitions
broken by partition (set_fanout.partitions' order) and, within a partition, Redis's own order. So a
position in the merged set is well defined, and a page at position k is found without reading the
k entries before it: `offsets_at` finds how many of each partition's entries come before position k
by a selection over scores (each round picks pivot scores and counts, with ZCOUNT in every
partition, the entries before each), which takes about log9(entries) rounds of one small fan-out
each, however deep the page. Page 1 needs none.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis

from cogworker.ops import set_entry as set_ops
from cogworker.ops import set_fanout
from cogworker.store.shards import Partition

# Rounds of the selection at most: about log9 of the entries when the sets hold still; sets changing
# under it every round could otherwise keep it going.
MAX_ROUNDS = 64
# Pivot scores a round of the selection counts: one pipeline of 2 x PIVOTS ZCOUNTs per partition
# client narrows the widest window to a ninth, so 100,000 entries take about 6 rounds, not 17.
PIVOTS = 8


def _bound(score: float, inclusive: bool) -> str:
    # repr writes a float Redis reads back exactly (and "inf" as Redis spells it).
    return f"{score!r}" if inclusive else f"({score!r}"


def sizes(home: redis.Redis, parts: Sequence[Partition], set_name: str) -> list[int]:
    replies = set_fanout.fan_out(home, parts, lambda pipe, p: pipe.zcard(set_ops.set_key(set_name, p)))
    return [int(r[0]) for r in replies]


def _scores_at(home: redis.Redis, p: Partition, set_name: str, indices: list[int], desc: bool) -> list[float]:
    """The scores at `indices` of the partition's set, in one pipeline (fewer when it has shrunk)."""
    key = set_ops.set_key(set_name, p)
    pipe = set_fanout.client_of(home, p).pipeline(transaction=False)
    for index in indices:
        pipe.zrange(key, index, index, desc=desc, withscores=True)
    return [float(found[0][1]) for found in pipe.execute() if found]


def offsets_at(
    home: redis.Redis, parts: Sequence[Partition], set_name: str, k: int, desc: bool, lens: Sequence[int]
) -> list[int]:
    """For each partition, how many of its entries come before merged position `k`.

    Each partition's answer lies in a window [lo, hi) of its entries, at first the whole set. A round
    takes PIVOTS scores spread over the widest window (one pipeline) and counts, in every partition
    (one fan-out), the entries listed before each pivot score and those up to it: the position k falls
    between two pivots, which narrows every window, the widest to a ninth; or among the entries of a
    pivot's score, which answers. About log9(entries) rounds."""
    lo, hi = [0] * len(parts), list(lens)
    if k <= 0:
        return lo
    if k >= sum(lens):
        return hi
    for _ in range(MAX_ROUNDS):
        widths = [h - low for low, h in zip(lo, hi, strict=True)]
        widest = max(range(len(parts)), key=lambda i: widths[i])
        width = widths[widest]
        if width <= 0:
            return lo
        picks = sorted({lo[widest] + j * width // (PIVOTS + 1) for j in range(1, PIVOTS + 1)} | {lo[widest]})
        # In listing order: ascending scores, or descending when the set lists highest first.
        pivots = sorted(set(_scores_at(home, parts[widest], set_name, picks, desc)), reverse=desc)
        if not pivots:
            return lo  # entries left meanwhile: a page near the position asked for

        def counts(pipe: Any, p: Partition, pivots: list[float] = pivots) -> None:
            key = set_ops.set_key(set_name, p)
            for pivot in pivots:
                if desc:  # before: higher scores; through: the pivot's score too
                    pipe.zcount(key, _bound(pivot, False), "+inf")
                    pipe.zcount(key, _bound(pivot, True), "+inf")
                else:
                    pipe.zcount(key, "-inf", _bound(pivot, False))
                    pipe.zcount(key, "-inf", _bound(pivot, True))

        replies = set_fanout.fan_out(home, parts, counts)
        for j in range(len(pivots)):
            before = [int(r[2 * j]) for r in replies]
            through = [int(r[2 * j + 1]) for r in replies]
            if k < sum(before):
                hi = [min(h, b) for h, b in zip(hi, before, strict=True)]
                break  # the pivots after this one are further on still
            if k < sum(through):
                return _among_ties(k, before, through)
            lo = [max(low, t) for low, t in zip(lo, through, strict=True)]
        # Sets changing between the reads could cross the bounds: keep every window well formed.
        hi = [max(low, h) for low, h in zip(lo, hi, strict=True)]
    return lo  # the sets kept changing under the search: a page near the position asked for


def _among_ties(k: int, before: list[int], through: list[int]) -> list[int]:
    """Position k is among the entries of one score: they list partition by partition."""
    left = k - sum(before)
    out = []
    for b, t in zip(before, through, strict=True):
        take = min(left, t - b)
        out.append(b + take)
        left -= take
    return out


def page(
    home: redis.Redis, set_name: str, start: int, count: int, desc: bool
) -> tuple[list[set_ops.Entry], int]:
    """`count` entries of the merged set from position `start`, and the merged set's size."""
    parts = set_fanout.partitions(home)
    if not parts:
        return [], 0
    lens = sizes(home, parts, set_name)
    offsets = offsets_at(home, parts, set_name, start, desc, lens)

    offset_of = dict(zip(parts, offsets, strict=True))

    def read(pipe: Any, p: Partition) -> None:
        at = offset_of[p]
        pipe.zrange(set_ops.set_key(set_name, p), at, at + count - 1, desc=desc, withscores=True)

    replies = set_fanout.fan_out(home, parts, read)
    merged = []
    for index, (p, (chunk,)) in enumerate(zip(parts, replies, strict=True)):
        for raw, score in chunk:
            merged.append(((-float(score) if desc else float(score), index), raw, float(score), p))
    # Stable: a partition's entries of one score keep Redis's order.
    merged.sort(key=lambda item: item[0])
    chosen = merged[:count]
    return [set_ops.parse_entry(set_name, raw, score, p) for _, raw, score, p in chosen], sum(lens)


Item = tuple[str, float, Partition]  # an entry's text, score and partition


# Entries a partition's stream reads at least per call: a merged slice of `batch` takes about
# batch / partitions from each, so each reads twice its share (fewer calls when one partition holds
# a run of the slice), not `batch` each: the first slices would otherwise move partitions x batch
# entries over the network to list `batch`.
MIN_PARTITION_SLICE = 64


def _partition_stream(
    client: redis.Redis,
    p: Partition,
    set_name: str,
    start: int,
    desc: bool,
    batch: int,
    first: list[tuple[str, float]],
) -> Iterator[Item]:
    """One partition's entries from `start`, read in slices (`first`: the first, read already)."""
    key = set_ops.set_key(set_name, p)
    position, chunk = start, first
    while True:
        for raw, score in chunk:
            yield raw, float(score), p
        if len(chunk) < batch:
            return
        position += batch
        chunk = cast(
            list[tuple[str, float]],
            client.zrange(key, position, position + batch - 1, desc=desc, withscores=True),
        )


def stream(
    home: redis.Redis, set_name: str, start: int = 0, desc: bool = False, batch: int = 500
) -> tuple[Iterator[Item], int]:
    """The merged set from position `start` (text, score and partition of each entry, not decoded:
    a search skips decoding what can't match), for a caller reading about `batch` at a time
    (sets.BATCH); and its size. Every partition's first slice is read at once (one fan-out), the
    next ones as the merge reaches them."""
    parts = set_fanout.partitions(home)
    if not parts:
        return iter(()), 0
    lens = sizes(home, parts, set_name)
    offsets = offsets_at(home, parts, set_name, start, desc, lens)
    index_of = {p: i for i, p in enumerate(parts)}
    per = max(MIN_PARTITION_SLICE, -(-2 * batch // len(parts)))
    offset_of = dict(zip(parts, offsets, strict=True))
    live = [p for p, at, n in zip(parts, offsets, lens, strict=True) if at < n]
    firsts = set_fanout.fan_out(
        home,
        live,
        lambda pipe, p: pipe.zrange(
            set_ops.set_key(set_name, p), offset_of[p], offset_of[p] + per - 1, desc=desc, withscores=True
        ),
    )
    streams = [
        _partition_stream(set_fanout.client_of(home, p), p, set_name, offset_of[p], desc, per, first)
        for p, (first,) in zip(live, firsts, strict=True)
    ]

    def order(item: Item) -> tuple[float, int]:
        return (-item[1] if desc else item[1], index_of[item[2]])

    return heapq.merge(*streams, key=order), sum(lens)


def at_score(home: redis.Redis, set_name: str, score: float, ref: str) -> set_ops.Entry | None:
    """`sets.at_score` over every partition's set: the first slice of each at once, then the rest of
    any partition holding more entries of that score. A URL names the entry as in the one-slot
    layout (`<score>-<ref>`): finding its partition costs this one fan-out, not a scan."""
    parts = set_fanout.partitions(home)
    replies = set_fanout.fan_out(
        home,
        parts,
        lambda pipe, p: pipe.zrangebyscore(
            set_ops.set_key(set_name, p), score, score, start=0, num=set_ops.BATCH, withscores=True
        ),
    )
    for partition, (chunk,) in zip(parts, replies, strict=True):
        for raw, found_score in chunk:
            entry = set_ops.parse_entry(set_name, raw, float(found_score), partition)
            if entry.ref == ref:
                return entry
    for partition, (chunk,) in zip(parts, replies, strict=True):
        if len(chunk) == set_ops.BATCH:
            holder = set_fanout.client_of(home, partition)
            more = set_ops.at_score_in(holder, set_name, score, ref, partition, offset=set_ops.BATCH)
            if more is not None:
                return more
    return None
