"""The poller's scheduler in the sharded layout: every queue partition's schedule and retry sets
(`shards.schedule(p)`, `shards.retry(p)`), each due entry graduated into its own partition's queue by
graduate_batch.lua on the client pinned to that partition's master (graduation.py).

Every process covers every partition, as every process covers the one set pair of the one-slot
layout: an entry is claimed and pushed in one script, so processes racing for it enqueue it once, and
no partition waits on a particular process being alive (a share per process would need a membership
protocol, and a dead member's share would wait for it to be noticed). The cost of that is kept flat:
- a poll (every COGWORKER_POLL_INTERVAL_S, randomised) reads each partition's two sets: two
  ZRANGEBYSCOREs per partition, and a script only where something is due;
- the look between polls, which enqueues an entry about 0.1-0.2 s after it falls due rather than at the
  next poll, reads at most PEEK_PARTITIONS partitions' first entries a second, taking them in turn, and
  remembers each partition's first due time between looks: with P partitions, a process looks at a
  given one every ceil(P / PEEK_PARTITIONS) seconds, and the early pass runs only for the partitions
  it knows are due. Right after an early pass the partitions it served are looked at again (as the
  one-slot poller looks again after each early pass), so a steady stream of due entries in a partition
  keeps its 0.1-0.2 s. So a quiet process sends at most 2 * PEEK_PARTITIONS ZRANGEs a second between
  polls, however many partitions the deployment has, plus two per partition it is moving entries in;
- a partition whose master doesn't answer is reported (once per outage, by its own name), left out of
  the looks until the next poll, and tried again at each poll; the other partitions are polled as usual.
  In a worker, the fetcher's partition health (worker/fetching/partition_health.py) is told too: the
  partition is then skipped by polls as well until its probe sees the master answer, so no poll waits
  on a master known to be down.
"""

from __future__ import annotations

import random
import time
from typing import Protocol

import redis

from cogworker.store import shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.loops.graduation import DUE_GAP_S, PEEK_EVERY_S, SetPlace
from cogworker.worker.recovering.partitions import Health, Known, PartitionScripts

# Partitions looked at per look between polls (one round trip each, two ZRANGEs).
PEEK_PARTITIONS = 8


class DueMover(Protocol):
    """What this scheduler uses of the poller (poller.py): moving one set's due entries."""

    def enqueue_due_in(self, place: SetPlace, now: float) -> int: ...


class PartitionPoller:
    def __init__(
        self,
        poller: DueMover,
        ctx: RedisContext,
        clients: ShardClients,
        rng: random.Random,
        health: Health | None = None,
    ) -> None:
        self._health = health
        self._poller = poller
        self._outages = ctx.outages
        self._poll_interval_s = ctx.settings.poll_interval_s
        self._scripts = PartitionScripts(clients)
        self._known = Known(ctx.client, ctx.settings.queue_spec.names)
        self._rng = rng
        self._down_until: dict[shards.Partition, float] = {}
        self._firsts: dict[shards.Partition, float] = {}  # partition -> its sets' first score, last looked
        self._due_soon: list[shards.Partition] = []
        self._served: list[shards.Partition] = []  # the partitions the last early pass served
        self._turn = 0
        self._looked_at = -PEEK_EVERY_S  # when the last turn of looks was taken

    @property
    def known(self) -> Known:
        """The partitions of this process's queues (the outbox sweep reads theirs too)."""
        return self._known

    def places(self, partition: shards.Partition) -> list[SetPlace]:
        client, scripts = self._scripts.of(partition)
        return [
            SetPlace.of_partition(client, scripts, partition, shards.schedule(partition)),
            SetPlace.of_partition(client, scripts, partition, shards.retry(partition)),
        ]

    def enqueue_due(self, *, early: bool = False) -> int:
        """Every due entry of every partition's sets (`early`: of the partitions the last look found
        due soon) into its partition's queue; returns how many."""
        partitions = list(self._due_soon) if early else self._known.get()
        if early:
            self._served = partitions  # looked at again by the next look, whatever its turn
        moved = 0
        for partition in partitions:
            if (early and self._is_down(partition)) or (
                self._health is not None and self._health.is_down(partition)
            ):
                continue
            now = time.time()
            try:
                for place in self.places(partition):
                    moved += self._poller.enqueue_due_in(place, now)
            except redis.RedisError as exc:
                self._down_until[partition] = time.monotonic() + self._poll_interval_s
                self._outages.report(f"Scheduler {partition}", exc)
                if self._health is not None and isinstance(exc, redis.ConnectionError):
                    self._health.failed(partition, exc)  # probed from now on; skipped until it answers
                continue
            if self._down_until.pop(partition, None) is not None:
                self._outages.recovered(f"Scheduler {partition}")
            first = self._firsts.get(partition)
            if first is not None and first <= now:
                del self._firsts[partition]  # moved; what comes next is known at its next look
        return moved

    def _is_down(self, partition: shards.Partition) -> bool:
        return self._down_until.get(partition, 0.0) > time.monotonic()

    def _skipped(self, partition: shards.Partition) -> bool:
        """Left out of the looks: it failed since the last poll, or the fetcher knows it is down."""
        return self._is_down(partition) or (self._health is not None and self._health.is_down(partition))

    def early_pass_in(self, left_s: float) -> float | None:
        """Poller._early_pass_in for the partitions: look at the next PEEK_PARTITIONS partitions' first
        entries (at most once per PEEK_EVERY_S), and at those the last early pass served (a steady
        stream of due entries in one partition is then enqueued on time, as in the one-slot layout);
        answer the seconds until the early pass when one known falls due within `left_s` (and
        PEEK_EVERY_S)."""
        try:
            partitions = [p for p in self._known.get() if not self._skipped(p)]
        except redis.RedisError:
            return None
        if not partitions:
            return None
        look = [p for p in self._served if not self._skipped(p)]
        self._served = []
        if time.monotonic() - self._looked_at >= PEEK_EVERY_S:
            self._looked_at = time.monotonic()
            count = min(len(partitions), PEEK_PARTITIONS)
            start = self._turn % len(partitions)
            self._turn = start + count
            look += [partitions[(start + i) % len(partitions)] for i in range(count)]
        for partition in dict.fromkeys(look):
            self._look(partition)
        if not self._firsts:
            return None
        now = time.time()
        gap = DUE_GAP_S
        known = {p: first for p, first in self._firsts.items() if not self._skipped(p)}
        if not known:
            return None
        wait_s = max(gap, min(known.values()) - now) + gap * self._rng.random()
        if wait_s >= min(left_s, PEEK_EVERY_S):
            return None
        self._due_soon = [p for p, first in known.items() if first <= now + wait_s]
        return wait_s

    def _look(self, partition: shards.Partition) -> None:
        """One round trip: the partition's two sets' first entries. A failure leaves the partition out
        of the looks until the next poll (which reports it)."""
        try:
            pipe = self._scripts.clients.of(partition).pipeline(transaction=False)
            pipe.zrange(shards.schedule(partition), 0, 0, withscores=True)
            pipe.zrange(shards.retry(partition), 0, 0, withscores=True)
            firsts = pipe.execute()
        except redis.RedisError:
            self._down_until[partition] = time.monotonic() + self._poll_interval_s
            return
        scores = [float(entries[0][1]) for entries in firsts if entries]
        if scores:
            self._firsts[partition] = min(scores)
        else:
            self._firsts.pop(partition, None)
