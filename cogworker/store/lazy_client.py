"""A Redis client and its scripts, built on first use and shared by the threads of one process.

The CLI and the Web UI hold one each: a command that never reaches Redis (or a UI mounted while Redis
is down) must not need a connection, so nothing connects until a page or a command asks for it.
"""

from __future__ import annotations

import threading

import redis

from cogworker.settings import Settings
from cogworker.store import fanout
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
                    self._client = connect(self.settings)
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
            # The partition clients the readers derived from it (store/fanout.py), if any.
            fanout.release(self._client)
            self._client.close()
