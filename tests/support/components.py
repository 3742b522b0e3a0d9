"""In-process cogworker components wired to a real Redis, for tests that drive them directly."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.settings import Settings
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts
from cogworker.worker.loops.poller import Poller
from cogworker.worker.recovering.recovery import Recovery


@dataclass
class Parts:
    client: redis.Redis
    scripts: Scripts
    outages: Outages
    locks: Locks
    recovery: Recovery
    poller: Poller
    ctx: RedisContext


def build(settings: Settings, identity: str = "test:0:0") -> Parts:
    ctx = RedisContext.build(settings)
    recovery = Recovery(ctx, identity)
    poller = Poller(ctx, recovery, quiet=lambda: False, scan_at_boot=True)
    return Parts(ctx.client, ctx.scripts, ctx.outages, ctx.locks, recovery, poller, ctx)
