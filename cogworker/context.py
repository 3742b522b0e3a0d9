"""The Redis-facing things one process shares: its client, the scripts bound to it, the settings,
outage reporting and deferred lock releases. Built once per process (after fork in a child) and
handed to each part that talks to Redis."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.connection import connect
from cogworker.locks import Locks
from cogworker.outage import Outages
from cogworker.scripts import Scripts
from cogworker.settings import Settings


@dataclass(frozen=True, slots=True)
class RedisContext:
    client: redis.Redis
    scripts: Scripts
    settings: Settings
    outages: Outages
    locks: Locks

    @classmethod
    def build(cls, settings: Settings, client: redis.Redis | None = None) -> RedisContext:
        client = client if client is not None else connect(settings)
        scripts = Scripts(client)
        outages = Outages()
        return cls(client, scripts, settings, outages, Locks(client, scripts, outages))
