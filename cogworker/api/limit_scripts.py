"""The limiter scripts' calls (api/limiter.py): `EVALSHA` sent on connections of their own.

A check is one round trip on the caller's thread, and in a worker it is a job's extra round trip.
Through redis-py's client path (pool checkout and return, the retry wrapper, event dispatch,
metrics recording) each call cost more CPU than the round trip itself: `make bench`'s limiter step
measured a no-op job's worker CPU more than doubled. Here a thread takes an idle connection from a
stack (a list's pop and append are atomic: no lock), sends the command and reads the reply itself,
as the fetch loop does (store/direct_connection.py), and puts it back.

The connections are made by the job API client's pool, so they have its address (a Sentinel's
master, a cluster's pinned node), TLS, timeouts and decoding; they are dropped for new ones after a
fork or when the client changes (`cogworker.configure`). A failed call raises as on the client (its
retries are off) and its connection reconnects on its next use; Redis without the script (a restart,
`SCRIPT FLUSH`) gets it by `EVAL`, which caches it again.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import redis
from redis.exceptions import NoScriptError

from cogworker.api import client
from cogworker.store import key_guard, scripts
from cogworker.store.direct_connection import DirectConnection

NAMES = ("limit_concurrent", "limit_window", "limit_bucket")
# Idle connections kept per process; more threads than that at once make and close their own.
MAX_IDLE = 32


class _Bound:
    """The connections of one client in one process."""

    def __init__(self, owner: redis.Redis) -> None:
        self.pid = os.getpid()
        self.client = owner
        self.idle: list[DirectConnection] = []


class LimitScripts:
    def __init__(self) -> None:
        self._mutex = threading.Lock()
        # An app thread of a preloading fork server may hold it when it forks a worker
        # (docs/architecture.md, "Locks across a fork").
        os.register_at_fork(after_in_child=self._renew_lock)
        self._bound: _Bound | None = None
        self._source = {name: scripts.source(name) for name in NAMES}
        self._sha = {name: hashlib.sha1(text.encode()).hexdigest() for name, text in self._source.items()}

    def _renew_lock(self) -> None:
        self._mutex = threading.Lock()

    def _current(self) -> _Bound:
        owner = client.connection()
        bound = self._bound
        if bound is None or bound.pid != os.getpid() or bound.client is not owner:
            with self._mutex:
                bound = self._bound
                if bound is None or bound.pid != os.getpid() or bound.client is not owner:
                    # A forked child never touches its parent's sockets: they are only forgotten.
                    bound = self._bound = _Bound(owner)
        return bound

    def run(self, name: str, names: list[str], args: list[Any]) -> list[Any]:
        """Script `name` on `names` (its KEYS) and `args`; a wrong-type key is reported to the key
        guards and raised as their error."""
        bound = self._current()
        try:
            conn = bound.idle.pop()
        except IndexError:
            conn = DirectConnection(bound.client)
        try:
            try:
                reply = conn.call("EVALSHA", self._sha[name], len(names), *names, *args)
            except NoScriptError:
                reply = conn.call("EVAL", self._source[name], len(names), *names, *args)
        finally:
            if len(bound.idle) < MAX_IDLE:
                bound.idle.append(conn)
            else:
                conn.close()
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            key_guard.request(bound.client, wrong)
            raise key_guard.wrong_type_error(bound.client, wrong)
        return list(reply)
