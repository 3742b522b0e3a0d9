"""The flusher: every COGWORKER_METRICS_FLUSH_S, and once at a clean stop, what the recorder counted
goes to Redis in one script call (store/lua/metrics_flush.lua), on a daemon thread of its own.

Each flush carries this process's identity and a sequence number; the script keeps the last number
it applied per identity and skips one it has seen. So a flush whose reply was lost after it ran is
counted once when it is sent again, and one that never ran is sent again until it does. Unsent
flushes wait in memory and go in order; past BACKLOG_MAX (Redis away for a minute) the oldest are
dropped and counted in a warning. Nothing here raises into a job or waits on one: a Redis that
refuses the script (an ACL without it, a read-only replica) is logged once and jobs run on.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from cogworker.store import key_guard, keys
from cogworker.store import metrics_layout as layout
from cogworker.store.redis_context import RedisContext
from cogworker.worker.metrics.recorder import Batch, Recorder, expiry_of

log = structlog.get_logger("cogworker.metrics")

# Unsent flushes kept while Redis is away: a minute's worth at the default interval.
BACKLOG_MAX = 12
# A flush record outlives any resend that could still come: the minute hashes are gone by then.
RECORD_TTL_S = layout.RETENTION_S
DROP_LOG_EVERY_S = 60.0


class Flusher:
    def __init__(
        self,
        ctx: RedisContext,
        identity: str,
        recorder: Recorder,
        *,
        queues: tuple[str, ...],
        interval_s: float,
        clock: Callable[[], float] = time.time,
        backlog_max: int = BACKLOG_MAX,
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self.identity = identity
        self.recorder = recorder
        self._queues = queues
        self._interval_s = interval_s
        self._clock = clock
        self._backlog_max = backlog_max
        self._pending: deque[tuple[int, Batch]] = deque()
        self._seq = 0
        self._lock = threading.Lock()  # the loop's flush and the stop's last one never overlap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0
        self._failing = False
        self._last_drop_log = -DROP_LOG_EVERY_S

    @property
    def pending(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """At a clean stop, after the jobs drained: the loop ends and the last counts go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.flush()

    def flush(self) -> bool:
        """Take what was counted and send every unsent flush, oldest first. True when none is left."""
        with self._lock:
            try:
                self._queue_taken()
                return self._send_pending()
            except Exception as exc:  # never let metrics end their thread or a stop
                log.error("metrics_flush_error", error=f"{type(exc).__name__}: {exc}")
                return False

    def _queue_taken(self) -> None:
        batch = self.recorder.take()
        # An empty flush still samples the queues' latency, which matters most when no job ends
        # (every thread stuck on a slow job); while others wait unsent, they sample it anyway.
        if not batch and self._pending:
            return
        self._seq += 1
        self._pending.append((self._seq, batch))
        if len(self._pending) > self._backlog_max:
            self._pending.popleft()
            self.dropped += 1
            now = time.monotonic()
            if now - self._last_drop_log >= DROP_LOG_EVERY_S:
                self._last_drop_log = now
                log.warning(
                    "metrics_flushes_dropped",
                    dropped=self.dropped,
                    note=f"Redis has taken no metrics flush for {self._backlog_max} flushes: the "
                    "oldest unsent counts are dropped; jobs run on",
                )

    def _send_pending(self) -> bool:
        while self._pending:
            seq, batch = self._pending[0]
            try:
                reply = self._send(seq, batch)
            except Exception as exc:
                self._failed(exc)
                return False
            wrong = key_guard.script_wrong_type(reply)
            if wrong is not None:  # the flush record itself: kept, sent again once it is moved aside
                self._failed(RuntimeError(f"{wrong} has the wrong type"))
                key_guard.request(self._client, wrong)
                return False
            self._pending.popleft()
            skipped = [k.decode() if isinstance(k, bytes) else str(k) for k in reply[1:]]
            if skipped:
                log.error(
                    "metrics_key_wrong_type",
                    keys=skipped,
                    note="their counts of this flush are skipped; the key guard is asked to move them",
                )
                # Only cogworker's own: a Sidekiq metrics key (COGWORKER_SIDEKIQ_METRICS) is Sidekiq's,
                # and the key guard never touches a key outside cogworker's families.
                own = [key for key in skipped if key.startswith(keys.PREFIX)]
                if own:
                    key_guard.request(self._client, *own)
        if self._failing:
            self._failing = False
            log.info("metrics_flush_recovered", dropped=self.dropped)
        return True

    def _failed(self, exc: BaseException) -> None:
        if not self._failing:
            self._failing = True
            log.warning(
                "metrics_flush_failed",
                error=f"{type(exc).__name__}: {exc}",
                note="metrics are kept and sent again; jobs run on",
            )

    def _send(self, seq: int, batch: Batch) -> Any:
        now = self._clock()
        minute = layout.minute_of(now)
        hashes = dict(batch.hashes)
        latency_key = layout.queues_key(minute) if self._queues else None
        if latency_key is not None:
            hashes.setdefault(latency_key, (expiry_of(minute), {}))
        names = list(hashes)
        counters = list(batch.counters)
        head: list[Any] = [seq, RECORD_TTL_S, int(now * 1000), len(names)]
        head += [names.index(latency_key) + 2 if latency_key is not None else 0, expiry_of(minute)]
        head.append(len(counters))
        fields: list[Any] = []
        for name in names:
            expire_at, amounts = hashes[name]
            fields += [expire_at, len(amounts)]
            for item in amounts.items():
                fields += item
        for name in counters:
            expire_at, by_index = batch.counters[name]
            fields += [expire_at, len(by_index)]
            for index, n in by_index.items():
                fields += [f"#{index}", n]
        sampled = [layout.field(queue, "lat_ms") for queue in self._queues]
        script_keys = [
            keys.metrics_flushed(self.identity),
            *names,
            *counters,
            *(keys.queue(q) for q in self._queues),
        ]
        return self._scripts.run(
            "metrics_flush", script_keys, [*head, *fields, *sampled], client=self._client
        )
