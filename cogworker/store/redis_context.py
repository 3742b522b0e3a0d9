"""The Redis-facing things one process shares: its client, the scripts bound to it, the settings,
outage reporting and deferred lock releases. Built once per process (after fork in a child) and
handed to each part that talks to Redis."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store.connection import connect
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts


@dataclass(frozen=True, slots=True)
class RedisContext:
    client: redis.Redis
    scripts: Scripts
    settings: SettingsFields
    outages: Outages
    locks: Locks

    @classmethod
    def build(cls, settings: SettingsFields, client: redis.Redis | None = None) -> RedisContext:
        client = client if client is not None else connect(settings)
        scripts = Scripts(client)
        outages = Outages()
        return cls(client, scripts, settings, outages, Locks(client, scripts, outages))
