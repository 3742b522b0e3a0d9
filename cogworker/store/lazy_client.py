"""A Redis client and its scripts, built on first use and shared by the threads of one process.

The CLI and the Web UI hold one each: a command that never reaches Redis (or a UI mounted while Redis
is down) must not need a connection, so nothing connects until a page or a command asks for it.
"""

from __future__ import annotations

import threading

import redis

from cogworker.settings import Settings
from cogworker.store.connection import connect
from cogworker.store.scripts import Scripts


class LazyClient:
    """`client` and `scripts` for `settings`, each made once; the Web UI's request threads may race to
    the first use, so the making is under a lock (uncontended after it)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: redis.Redis | None = None
        self._scripts: Scripts | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    client = connect(self.settings)
                    if self.settings.cluster_sharding == "queues":
                        # The set readers' partition clients (ops/set_fanout.py), found by this client.
                        from cogworker.ops import set_fanout

                        set_fanout.register(client, self.settings)
                    self._client = client
        return self._client

    @property
    def scripts(self) -> Scripts:
        if self._scripts is None:
            client = self.client
            with self._lock:
                if self._scripts is None:
                    self._scripts = Scripts(client)
        return self._scripts

    def close(self) -> None:
        if self._client is not None:
            from cogworker.ops import set_fanout

            set_fanout.release(self._client)
            self._client.close()
