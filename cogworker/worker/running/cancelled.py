"""A worker's side of `cogworker.cancel`: learning of cancels, and ending cancelled jobs.

`CancelWatch` reads the cancel record (`cogworker:cancels`, written by ops/cancel.py) once when the
process starts, before its first fetch, and then about once a second: one ZRANGEBYSCORE per process
per second, whatever the job rate, and nothing per job. What it reads goes to api/current_job.py,
which flags the jobs running here (an `async def` job's task is cancelled through the flag's
callback, worker/running/async_loop.py) and remembers the jids, so a job fetched later with one of them --
fetched again after its process died with it, or held here and not yet started -- ends as cancelled
before its body runs. Reading since the newest entry seen, less a few seconds of slack: entries are
stamped with Redis's clock by the script that writes them, and the slack covers two written in the
same instant on either side of a read.

A job that ends with JobCancelled is settled by processor.py like any job that ends unrun:
acknowledged (off the in-progress list for good, never retried), counted `cancelled` in Redis and
in the per-job metrics, its locks released, and logged `job_cancelled`.
"""

from __future__ import annotations

import threading
from typing import cast

import structlog

from cogworker.api import current_job
from cogworker.store import key_guard, keys
from cogworker.store.redis_context import RedisContext

log = structlog.get_logger("cogworker.cancel")

POLL_S = 1.0
SLACK_S = 5.0


class CancelWatch:
    def __init__(self, ctx: RedisContext) -> None:
        self._client = ctx.client
        self._outages = ctx.outages
        self._since: float | None = None  # the newest entry's stamp read so far
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> int:
        """Read the cancels written since the last read (all of them the first time); returns how
        many were new. Raises on a Redis error."""
        low: float | str = "-inf" if self._since is None else self._since - SLACK_S
        entries = cast(
            list[tuple[str, float]], self._client.zrangebyscore(keys.CANCELS, low, "+inf", withscores=True)
        )
        fresh = [(str(jid), float(at)) for jid, at in entries if not current_job.known_cancelled(str(jid))]
        if fresh:
            log.debug("cancels_read", count=len(fresh))
        for jid in current_job.note_cancelled(fresh):
            log.info(
                "job_cancel_requested", jid=jid, note="the job is flagged (an async job's task cancelled)"
            )
        if entries:
            newest = max(float(at) for _jid, at in entries)
            self._since = newest if self._since is None else max(self._since, newest)
            current_job.forget_before(self._since - keys.CANCEL_KEEP_S)
        return len(fresh)

    def read_guarded(self) -> bool:
        try:
            self.read()
        except Exception as exc:
            self._outages.report("Cancel watch", exc)
            if key_guard.is_wrong_type(exc):
                key_guard.request(self._client, keys.CANCELS)
            return False
        self._outages.recovered("Cancel watch")
        return True

    def start(self) -> None:
        """Read the whole record now (before the first fetch), then keep reading in a thread."""
        self.read_guarded()
        self._thread = threading.Thread(target=self._loop, name="cancel-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.read_guarded()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
