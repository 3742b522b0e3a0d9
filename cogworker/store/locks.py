"""Locks a job holds until it has run: its unique claim and its periodic entry's running lock.

They are released when the job succeeds or fails for good, including when it is filed in dead
outside the middleware chain (poison pills, unreadable payloads, handed-over filings). Releasing is
owner-checked (never another copy's lock) and best-effort: a release that fails is kept and retried
later, rather than blocking duplicates for the lock's whole TTL.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.store import key_guard, keys
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts

log = structlog.get_logger("cogworker.locks")

UNTIL_EXECUTED = "until_executed"


def unique_digest(job: dict[str, Any]) -> str:
    """The same job name, arguments and queue give the same digest."""
    basis = codec.dumps([job.get("class"), job.get("queue"), job.get("args", []), job.get("kwargs", {})])
    return hashlib.sha256(basis.encode()).hexdigest()[:40]


def held_locks(job: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, owner) for every lock this job holds while it is queued or running."""
    jid = str(job.get("jid") or "")
    if not jid:
        return []
    held: list[tuple[str, str]] = []
    if job.get("unique") == UNTIL_EXECUTED:
        # Arguments JSON can't write (nested too deep): no client could have pushed it with a claim.
        with contextlib.suppress(codec.EncodeError):
            held.append((keys.unique(unique_digest(job)), jid))
    name = job.get("periodic_name")
    if isinstance(name, str) and job.get("periodic_until_executed") is True:
        held.append((keys.periodic_running(name), jid))
    return held


class Locks:
    def __init__(self, client: redis.Redis, scripts: Scripts, outages: Outages) -> None:
        self._client = client
        self._scripts = scripts
        self._outages = outages
        self._deferred: set[tuple[str, str]] = set()
        self._mutex = threading.Lock()

    def release_terminal(self, job: dict[str, Any]) -> None:
        for key, owner in held_locks(job):
            self.release(key, owner)

    def release(self, key: str, owner: str) -> bool:
        try:
            reply = self._scripts.run("owned_delete", [key], [owner], client=self._client)
        except Exception as exc:
            self._outages.report("Lock release", exc)
            with self._mutex:
                self._deferred.add((key, owner))
            return False
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            # Not a lock any more (something else was written there): nothing of ours to release;
            # the key guard moves it aside so that pushes can claim it again.
            log.error("lock_key_has_wrong_type", key=wrong)
            key_guard.request(self._client, wrong)
        return True

    def retry_deferred(self) -> int:
        with self._mutex:
            pending, self._deferred = self._deferred, set()
        released = 0
        for key, owner in pending:
            if self.release(key, owner):
                released += 1
        if pending and released == len(pending):
            self._outages.recovered("Lock release")
        return released

    @property
    def deferred(self) -> int:
        with self._mutex:
            return len(self._deferred)

    def reset(self) -> None:
        """After fork: the parent's pending releases are the parent's to retry."""
        with self._mutex:
            self._deferred.clear()
