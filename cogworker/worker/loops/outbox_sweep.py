"""The poller's sweep of the outboxes (sharded layout: store/outbox.py): every poll, the home slot's and
those of the partitions this process reads, each one HSCAN (nothing more when empty). An entry older
than the outbox's lease was left by a mover that died or lost its connection: it is carried out here.
Partitions whose master is down are left for the next poll.
"""

from __future__ import annotations

import redis

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
        for partition in self._known.get():
            if self._health is not None and self._health.is_down(partition):
                continue
            component = f"Outbox {partition}"
            try:
                moved += self._mover.sweep(partition)
            except redis.RedisError as exc:
                self._outages.report(component, exc)
                continue
            self._outages.recovered(component)
        return moved
