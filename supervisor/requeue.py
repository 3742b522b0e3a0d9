"""Immediate requeue: the jobs of a child that died abnormally go back to their queues at once.

The supervisor knows first (DESIGN §4.3): when it reaps a child killed by a signal, crashed, or killed
by us (hung, straggler), that child's in-progress list is requeued right away, counting orphanings
so a poison pill ends in dead. Heartbeat-based orphan recovery in the live children stays the backstop.

The supervisor's own Redis client is built lazily and disconnected after every use: an open socket
would be inherited by the next fork, and the children must never share it. Requeues are rare (only
abnormal deaths), so reconnecting each time costs nothing that matters. When Redis is down, the
identity waits in a pending set and is retried on later ticks, with a growing delay between tries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import redis
import structlog

from cogworker.connection import connect
from cogworker.context import RedisContext
from cogworker.locks import Locks
from cogworker.outage import Outages
from cogworker.recovery import Recovery
from cogworker.scripts import Scripts
from cogworker.settings import Settings

log = structlog.get_logger("cogworker.swarm")

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


class Requeuer:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float],
        on_done: Callable[[str, int, float], None] | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        # (identity, jobs moved, seconds since the death was seen): recovery latency for metrics.
        self._on_done = on_done
        self._since: dict[str, float] = {}
        self._client: redis.Redis | None = None
        self._recovery: Recovery | None = None
        self._locks: Locks | None = None
        self._outages = Outages()
        self.pending: set[str] = set()
        self._retry_at = 0.0
        self._retry_delay = RETRY_FIRST_S

    def requeue(self, identity: str) -> bool:
        """Requeue a dead child's list now; False (and kept for a retry) when Redis can't be reached."""
        self.pending.add(identity)
        self._since.setdefault(identity, self._clock())
        done = self._run([identity])
        return identity in done

    def retry_due(self, *, force: bool = False) -> None:
        """On every tick: retry the pending identities once their delay has passed."""
        if not self.pending or (self._clock() < self._retry_at and not force):
            return
        self._run(sorted(self.pending))

    def _run(self, identities: list[str]) -> set[str]:
        done: set[str] = set()
        try:
            recovery = self._ensure()
            for identity in identities:
                result = recovery.requeue_dead(identity)
                done.add(identity)
                self.pending.discard(identity)
                since = self._since.pop(identity, self._clock())
                if self._on_done is not None:
                    self._on_done(identity, result.moved, self._clock() - since)
                log.info(
                    "child_jobs_requeued",
                    child_identity=identity,
                    moved=result.moved,
                    dead=len(result.buried),
                    kept=result.failed,
                )
            recovery.retry_burials()
            if self._locks is not None:
                self._locks.retry_deferred()
        except Exception as exc:
            self._outages.report("Supervisor requeue", exc)
            self._retry_at = self._clock() + self._retry_delay
            self._retry_delay = min(self._retry_delay * 2, RETRY_MAX_S)
            log.warning(
                "child_jobs_requeue_deferred",
                pending=sorted(self.pending),
                retry_in_s=round(self._retry_at - self._clock(), 2),
                note="retried while the swarm runs; heartbeat orphan recovery is the backstop",
            )
        else:
            self._outages.recovered("Supervisor requeue")
            self._retry_delay = RETRY_FIRST_S
        finally:
            self.disconnect()
        return done

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
