"""In-process cogworker components wired to a real Redis, for tests that drive them directly."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from cogworker.connection import connect
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


def build(settings: Settings, identity: str = "test:0:0") -> Parts:
    client = connect(settings)
    scripts = Scripts(client)
    outages = Outages()
    locks = Locks(client, scripts, outages)
    recovery = Recovery(client, scripts, settings, outages, locks, identity)
    poller = Poller(
        client, scripts, settings, outages, recovery, locks, quiet=lambda: False, scan_at_boot=True
    )
    return Parts(client, scripts, outages, locks, recovery, poller)
