"""Basic fetch (`BRPOP`), for Redis older than 6.2: a job lives only in this process's memory while
it runs. BRPOP reads the paused set in the same write, so a job taken as a pause landed is handed
back unstarted.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import redis
import structlog

from cogworker.settings_fields import QueueSpec
from cogworker.store import keys
from cogworker.store.direct_connection import DirectConnection
from cogworker.worker.fetching.fetch import (
    FetchResult,
    Reconciled,
    Waited,
    WakeListener,
    Work,
    queue_order,
    raise_refused,
    today,
)

log = structlog.get_logger("cogworker.fetch")


class BasicFetch:
    """`BRPOP`: the job is only in this process's memory until it finishes. Kept for Redis < 6.2;
    a process killed mid-job loses the job, and so does a BRPOP whose reply is lost (Redis stalled
    past the client's timeout and popped anyway), which is why reliable fetch is the default."""

    keeps_in_progress = False

    def __init__(self, client: redis.Redis, blocking_client: redis.Redis, spec: QueueSpec) -> None:
        self._client = client
        # Only the fetcher thread pops (a final ack flush fetches no job), so it owns this one.
        self._blocking_direct = DirectConnection(blocking_client)
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = ""
        self._wake = WakeListener(blocking_client, frozenset(spec.names))

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        if acks:
            day = today()
            pipe = self._client.pipeline(transaction=False)
            pipe.incrby(keys.STAT_PROCESSED, len(acks))
            pipe.incrby(keys.stat_processed_day(day), len(acks))
            pipe.execute()
        if limit <= 0:
            return FetchResult(acked=len(acks))
        paused = set(self._client.smembers(keys.PAUSED))
        order = [n for n in queue_order(self._spec, self._rng) if n not in paused]
        if not order:
            return FetchResult(acked=len(acks), all_paused=True)
        # Subscribed while every queue was paused: unread wake-ups would pile up in Redis.
        self._wake.close()
        # The paused set is read again right behind the BRPOP, in the same write: a pause that
        # lands while BRPOP waits is seen at no extra round trip.
        popped, paused_now = self._blocking_direct.call_many(
            ("BRPOP", *(keys.queue(n) for n in order), 1), ("SMEMBERS", keys.PAUSED)
        )
        raise_refused(popped)
        if not popped:
            return FetchResult(acked=len(acks))
        work = Work(keys.queue_name(str(popped[0])), str(popped[1]))
        paused_read = not isinstance(paused_now, redis.ResponseError)
        if paused_read and work.queue in paused_now and self._hand_back(work):
            return FetchResult(acked=len(acks), all_paused=all(n in paused_now for n in order))
        return FetchResult([work], len(acks))

    def _hand_back(self, work: Work) -> bool:
        """A job popped as its queue was paused goes back unstarted. If Redis fails now, it runs:
        with basic fetch it exists only in this process's memory."""
        try:
            self.give_back(work)
        except redis.RedisError as exc:
            log.error("paused_job_not_given_back", queue=work.queue, error=str(exc), note="running it")
            return False
        return True

    @property
    def can_block(self) -> bool:
        return False

    @property
    def run_id(self) -> str:
        return ""  # its jobs are on no list: nothing Redis could lose of them is compared

    @property
    def wait_returns_job(self) -> bool:
        return False

    def wait(self, timeout_s: float) -> Waited:
        return Waited()

    def wait_for_wake(self, timeout_s: float) -> None:
        self._wake.wait(timeout_s)

    def discard_backlog(self) -> None:
        """On the fetcher thread, while busy: drop wake-ups that piled up (WakeListener says why)."""
        self._wake.discard_backlog()

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Basic fetch keeps no in-progress list: nothing to square."""
        return Reconciled()

    def close(self) -> None:
        self._blocking_direct.close()
        self._wake.close()

    def give_back(self, work: Work) -> bool:
        self._client.rpush(keys.queue(work.queue), work.raw)
        return True
