"""The requeue requests: which dead children's jobs the supervisor still waits to see go back.

When the supervisor reaps a child that died abnormally (killed by a signal, crashed, or killed by us
as hung or a straggler), it asks the fork server to requeue that child's in-progress list at once
(forkserver/redis_requeue.py does the Redis work there). This module keeps the bookkeeping: an
identity stays pending until the fork server says it is done; when Redis is down (or no fork server
is up) it is retried on later ticks, with a growing delay between tries, and at once when a new fork
server is ready. Nothing here talks to Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

log = structlog.get_logger("cogworker.swarm")

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0

# identity -> whether the request was handed to a fork server
Send = Callable[[str], bool]


class RequeueRequests:
    def __init__(
        self,
        clock: Callable[[], float],
        on_done: Callable[[str, int, float], None] | None = None,
    ) -> None:
        self._clock = clock
        # (identity, jobs moved, seconds since the death was seen): recovery latency for metrics.
        self._on_done = on_done
        self._since: dict[str, float] = {}
        self.pending: set[str] = set()  # not done yet: in flight or waiting for a retry
        self.in_flight: set[str] = set()  # sent, no answer yet
        self._retry_at = 0.0
        self._retry_delay = RETRY_FIRST_S

    def ask(self, identity: str, send: Send) -> None:
        """A child died holding `identity`'s list: ask for it to be requeued now."""
        self.pending.add(identity)
        self._since.setdefault(identity, self._clock())
        self._send([identity], send)

    def retry_due(self, send: Send, *, force: bool = False) -> None:
        """On every tick: send the waiting identities again once their delay has passed."""
        waiting = sorted(self.pending - self.in_flight)
        if not waiting or (self._clock() < self._retry_at and not force):
            return
        self._send(waiting, send)

    def _send(self, identities: list[str], send: Send) -> None:
        for identity in identities:
            if identity in self.in_flight:
                continue
            if send(identity):
                self.in_flight.add(identity)
            else:
                self._deferred("no fork server is running")
                return

    def on_answer(self, answer: dict[str, Any]) -> None:
        """The fork server's answer to one request."""
        identity = str(answer.get("identity", ""))
        self.in_flight.discard(identity)
        if not answer.get("ok"):
            self._deferred(str(answer.get("error", "unknown error")))
            return
        self.pending.discard(identity)
        self._retry_delay = RETRY_FIRST_S
        since = self._since.pop(identity, self._clock())
        moved = int(answer.get("moved", 0))
        if self._on_done is not None:
            self._on_done(identity, moved, self._clock() - since)
        log.info(
            "child_jobs_requeued",
            child_identity=identity,
            moved=moved,
            dead=int(answer.get("dead", 0)),
            kept=int(answer.get("kept", 0)),
        )

    def lost(self, identities: Iterable[str]) -> None:
        """A fork server died (or was killed as hung) owing these answers: they go to the next one."""
        self.in_flight.difference_update(identities)
        self._retry_at = self._clock()

    def _deferred(self, error: str) -> None:
        if self._clock() < self._retry_at:
            return  # already waiting: the other answers of one batch don't double the delay again
        self._retry_at = self._clock() + self._retry_delay
        self._retry_delay = min(self._retry_delay * 2, RETRY_MAX_S)
        log.warning(
            "child_jobs_requeue_deferred",
            pending=sorted(self.pending),
            error=error,
            retry_in_s=round(self._retry_at - self._clock(), 2),
            note="retried while the swarm runs; heartbeat orphan recovery is the backstop",
        )
