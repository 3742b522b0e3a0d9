"""A partition whose master doesn't answer, for the sharded recovery and poller tests: the deployment's
real clients, except that one partition's goes to a port nothing listens on (a real refused connection,
as from a master that is down), so the test can see the other partitions served and the refused one
served once its clients are the real ones again."""

from __future__ import annotations

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store import shards
from cogworker.store.shard_clients import ShardClients


class OneMasterDown(ShardClients):
    def __init__(self, settings: SettingsFields, home: redis.Redis, down: shards.Partition) -> None:
        super().__init__(settings, home=home)
        self._down = down
        self._nowhere = redis.Redis(port=1, socket_connect_timeout=0.5, decode_responses=True)

    def of(self, partition: shards.Partition) -> redis.Redis:
        return self._nowhere if partition == self._down else super().of(partition)

    def close(self) -> None:
        super().close()
        self._nowhere.close()
