"""In-process cogworker components wired to a real Redis, for tests that drive them directly."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.context import RedisContext
from cogworker.locks import Locks
from cogworker.outage import Outages
from cogworker.poller import Poller
from cogworker.recovery import Recovery
from cogworker.scripts import Scripts
from cogworker.settings import Settings


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
