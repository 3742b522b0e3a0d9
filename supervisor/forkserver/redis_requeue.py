"""In the fork server: put a dead child's jobs back on their queues, in Redis.

The supervisor knows first when a child dies abnormally, and asks the fork server (which has the Redis
client) to requeue that child's in-progress list at once (supervisor/restart_policy/requeue_requests.py
keeps track of what was asked), counting orphanings so a poison pill ends in dead. Heartbeat-based
orphan recovery in the live children stays the backstop, minutes later; see "A child dies" in
docs/architecture.md.

The client is built lazily and disconnected after every use: an open socket would be inherited by
the next fork, and the children must never share it. Requeues are rare (only abnormal deaths), so
reconnecting each time costs nothing that matters.

In the sharded layout (COGWORKER_CLUSTER_SHARDING=queues) the child kept one list per queue partition:
Recovery requeues each in its own slot (worker/recovering/sharded_recovery.py) through a client per
partition, and those are closed after every use too. A partition whose master doesn't answer raises
(the others were requeued), and the supervisor asks again later.
"""

from __future__ import annotations

import contextlib

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store.connection import connect
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.recovering.requeue_result import RequeueResult


class RedisRequeue:
    def __init__(self, settings: SettingsFields) -> None:
        self._settings = settings
        self._client: redis.Redis | None = None
        self._recovery: Recovery | None = None
        self._locks: Locks | None = None
        self._outages = Outages()

    def requeue_dead_child(self, identity: str) -> RequeueResult:
        """Requeue `identity`'s list now. Raises when Redis can't be reached (the supervisor retries)."""
        try:
            recovery = self._ensure()
            result = recovery.requeue_dead(identity)
            recovery.retry_burials()
            if self._locks is not None:
                self._locks.retry_deferred()
        except Exception as exc:
            self._outages.report("Supervisor requeue", exc)
            raise
        else:
            self._outages.recovered("Supervisor requeue")
            return result
        finally:
            self.disconnect()

    def _ensure(self) -> Recovery:
        if self._recovery is None:
            self._client = connect(self._settings)
            scripts = Scripts(self._client)
            self._locks = Locks(self._client, scripts, self._outages)
            self._recovery = Recovery(
                RedisContext(self._client, scripts, self._settings, self._outages, self._locks)
            )
        return self._recovery

    def disconnect(self) -> None:
        """Close every pooled socket (the client reconnects on its next use)."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.connection_pool.disconnect()
        if self._recovery is not None and self._recovery.sharded is not None:
            with contextlib.suppress(Exception):
                self._recovery.sharded.close()
