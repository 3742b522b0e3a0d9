"""Which fetcher a worker process runs, chosen once at start by the launcher.

- The sharded layout (a ShardRoute): ShardedFetch, reliable only; a server that can't run LMOVE is a
  configuration error there (`reliable_supported` is asked first), since a BRPOP waits on one slot.
- One slot, a server with LMOVE (Redis 6.2 or later): ReliableFetch.
- One slot, an older server: BasicFetch (BRPOP), with a warning that a killed process loses its jobs.
  A reliable fetcher whose LMOVE is refused later falls back to the same (worker/fetching/fetch_fallback.py).
"""

from __future__ import annotations

import redis
import structlog

from cogworker.settings_fields import SettingsFields
from cogworker.store.replicas import AckWait
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.basic_fetch import BasicFetch
from cogworker.worker.fetching.fetch import Fetcher, server_supports_reliable
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.fetching.sharded_fetch import ShardedFetch
from cogworker.worker.settling.shard_route import ShardRoute

log = structlog.get_logger("cogworker.launcher")


def reliable_supported(client: redis.Redis) -> bool:
    """Whether the server runs LMOVE; True when INFO is refused (an ACL, a proxy): reliable fetch is
    then tried, and falls back if LMOVE is refused."""
    try:
        return server_supports_reliable(client)
    except redis.ResponseError:
        return True


class FetchChoice:
    """What a worker process's fetchers are built from: its clients, scripts, identity and settings."""

    def __init__(
        self,
        settings: SettingsFields,
        client: redis.Redis,
        blocking: redis.Redis,
        scripts: Scripts,
        identity: str,
        route: ShardRoute | None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._blocking = blocking
        self._scripts = scripts
        self._identity = identity
        self._route = route

    def choose(self) -> Fetcher:
        settings = self._settings
        if self._route is not None:
            route = self._route
            return ShardedFetch(
                route.clients,
                self._scripts,
                self._identity,
                settings.queue_spec,
                route.placements,
                route.health,
                ack_wait=AckWait.of(settings),
            )
        if not reliable_supported(self._client):
            log.warning(
                "redis_too_old_for_reliable_fetch",
                note="using basic fetch (BRPOP): a killed "
                "process loses its running jobs; upgrade Redis to 6.2 or later",
            )
            return self.basic()
        return ReliableFetch(
            self._client,
            self._blocking,
            self._scripts,
            self._identity,
            settings.queue_spec,
            ack_wait=AckWait.of(settings),
        )

    def basic(self) -> BasicFetch:
        """Basic fetch (BRPOP): the old server's, and the fallback after a refused LMOVE."""
        return BasicFetch(self._client, self._blocking, self._settings.queue_spec)
