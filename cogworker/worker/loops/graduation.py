"""Where the poller moves a set's due entries (poller.py): the set, the queue each goes to, and the keys
and client the graduate and bury scripts are given.

In the one-slot layout every set and queue is in the deployment's one slot, and an entry goes to the
queue its payload names. In the sharded layout (store/shards.py) each queue partition has its own
schedule and retry sets, in its own slot: an entry goes to the queue of the partition whose set holds
it, with that partition's registry, wake channel, dead set and counters, on the client pinned to its
master, so graduate_batch.lua still claims and pushes each entry in one single-slot step.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.store import keys, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts

# Between polls, an entry known to fall due before the next one is enqueued this soon after its time
# (plus up to as much again of jitter, so processes don't race for it): the poll interval (5 s by
# default) was its lateness, and the schedule's p99 lateness target is 1 s (issue 38). It is also
# the shortest gap between two such early passes, so a steady stream of due entries costs a process
# at most 10 passes a second, each one ZRANGEBYSCORE per set and one script per entry moved.
DUE_GAP_S = 0.1
# How often, at most, the poller looks at the sets' first entries between polls: an entry pushed
# after a look, due before the next poll (`perform_in(1)`), waits this long at most, not the poll.
PEEK_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class SetPlace:
    client: redis.Redis
    scripts: Scripts
    set_key: str
    registry: str
    wake: str
    dead: str
    stat_failed: str
    deaths: str
    partition: shards.Partition | None = None

    @classmethod
    def one_slot(cls, ctx: RedisContext, set_key: str) -> SetPlace:
        return cls(
            ctx.client,
            ctx.scripts,
            set_key,
            keys.QUEUES,
            keys.WAKE_CHANNEL,
            keys.DEAD,
            keys.STAT_FAILED,
            keys.DEATHS,
        )

    @classmethod
    def of_partition(
        cls, client: redis.Redis, scripts: Scripts, partition: shards.Partition, set_key: str
    ) -> SetPlace:
        return cls(
            client,
            scripts,
            set_key,
            shards.registry(partition),
            shards.wake_channel(partition),
            shards.dead(partition),
            shards.stat(partition, "failed"),
            shards.deaths(partition),
            partition,
        )

    def queue_key(self, name: str) -> str:
        """The list an entry for queue `name` is pushed onto (sharded: the partition's, whatever the name)."""
        return keys.queue(name) if self.partition is None else shards.queue_key(self.partition)
