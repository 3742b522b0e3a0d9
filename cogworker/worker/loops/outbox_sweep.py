"""The poller's sweep of the outboxes (sharded layout: store/outbox.py): every poll, the home slot's and
those of the partitions this process reads. An entry older than the outbox's lease was left by a mover
that died or lost its connection: it is carried out here.

The partitions' outboxes are almost always empty, so their lengths are read first, one pipeline per
master (store/fanout.py), and only a non-empty one is scanned: a poll costs a round trip per master,
not per partition. When that read fails (a master away), each partition is asked on its own, so the
others are still swept. Partitions whose master is known to be down are left for the next poll.
"""

from __future__ import annotations

import redis

from cogworker.store import fanout, shards
from cogworker.store.outage import Outages
from cogworker.store.outbox import Mover
from cogworker.worker.recovering.partitions import Health, Known


class OutboxSweep:
    def __init__(self, mover: Mover, known: Known, outages: Outages, health: Health | None) -> None:
        self._mover = mover
        self._known = known
        self._outages = outages
        self._health = health

    def sweep(self) -> int:
        """Move every lapsed entry of the home outbox and the partitions'; how many were moved. The home
        outbox's failure is raised (the poller reports it); a partition's is reported by its name."""
        moved = self._mover.sweep(None)
        partitions = [p for p in self._known.get() if self._health is None or not self._health.is_down(p)]
        for partition in self._non_empty(partitions):
            component = f"Outbox {partition}"
            try:
                moved += self._mover.sweep(partition)
            except redis.RedisError as exc:
                self._outages.report(component, exc)
                continue
            self._outages.recovered(component)
        return moved

    def _non_empty(self, partitions: list[shards.Partition]) -> list[shards.Partition]:
        """The partitions whose outbox holds entries; all of them when their lengths can't be read."""
        if not partitions:
            return []
        try:
            lengths = fanout.pipelined(
                self._mover.home, partitions, lambda pipe, p: pipe.hlen(shards.outbox(p))
            )
        except redis.RedisError:
            return partitions
        return [p for p in partitions if int(lengths[p][0] or 0) > 0]
