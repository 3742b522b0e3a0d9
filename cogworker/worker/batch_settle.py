"""Settling batch members (api/batch.py): their acknowledgement, or dead filing, and the count of
their end in their batch are one script (store/batch_scripts.py), never the batched ack of fetch.lua.

Imported by the settler only when it meets a job that carries a batch (`bid` or `bcb`): a worker
whose jobs have none never loads this module. An acknowledgement that fails (Redis down, a key of the
wrong type) is kept and retried with the filings; at shutdown it is left in progress, so the member
runs again after recovery and is counted then (once: the count is per jid).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker.settings import Settings
from cogworker.store import batch_scripts, key_guard, keys
from cogworker.store.outage import Outages

log = structlog.get_logger("cogworker.batch")


@dataclass(slots=True)
class PendingAck:
    raw: str
    job: dict[str, Any]
    outcome: str


class MemberAcks:
    """One worker's acknowledgements of batch members: sent at once on the job's thread (one round
    trip, as a filing is), kept and retried when Redis fails."""

    def __init__(self, client: redis.Redis, settings: Settings, outages: Outages, in_progress: str) -> None:
        self._client = client
        self._settings = settings
        self._outages = outages
        self._in_progress = in_progress
        self._pending: list[PendingAck] = []
        self._lock = threading.Lock()

    def ack(self, raw: str, job: dict[str, Any], outcome: str) -> None:
        item = PendingAck(raw, job, outcome)
        try:
            self._send(item)
        except Exception as exc:
            self._report(exc)
            with self._lock:
                self._pending.append(item)

    def _send(self, item: PendingAck) -> None:
        day = time.strftime("%Y-%m-%d", time.gmtime())
        jid = str(item.job.get("jid") or "")
        layout_keys, layout_args = batch_scripts.layout(
            item.job, item.outcome, "", self._settings.batch_ttl_s
        )
        if item.outcome != "ok":
            layout_args[2] = f"ended without running ({item.outcome})"
            layout_args[1] = "failed"
        own_keys = [
            self._in_progress,
            keys.STAT_PROCESSED,
            keys.stat_processed_day(day),
            keys.orphanings(jid),
        ]
        reply = batch_scripts.run(
            self._client, "batch_ack", [*own_keys, *layout_keys], [item.raw, *layout_args]
        )
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            raise key_guard.WrongTypeKey(wrong, None)
        if not reply:
            log.info("settle_skipped_requeued_job", jid=jid, note="another process runs its copy")

    def _report(self, exc: Exception) -> None:
        if isinstance(exc, key_guard.WrongTypeKey):
            log.error("batch_ack_stopped_by_wrong_type_key", key=exc.key)
            key_guard.request(self._client, exc.key)
            return
        self._outages.report("Settle", exc)

    def retry(self) -> bool:
        """Send the kept acknowledgements; False when Redis still fails (the rest stay kept)."""
        with self._lock:
            pending, self._pending = self._pending, []
        for index, item in enumerate(pending):
            try:
                self._send(item)
            except Exception as exc:
                self._report(exc)
                with self._lock:
                    self._pending[:0] = pending[index:]
                return False
        return True

    def holding(self) -> list[str]:
        with self._lock:
            return [item.raw for item in self._pending]


def run_filed(
    client: redis.Redis,
    settings: Settings,
    name: str,
    script_keys: list[str],
    args: list[Any],
    job: dict[str, Any],
) -> Any:
    """Run the filing script `name` (settle or file_unsettled) of a batch member going to dead, with
    its death counted in its batch in the same script."""
    error = f"{job.get('error_class') or ''}: {job.get('error_message') or ''}"[:1000]
    layout_keys, layout_args = batch_scripts.layout(job, "dead", error, settings.batch_ttl_s)
    return batch_scripts.run(client, f"filed:{name}", script_keys + layout_keys, args + layout_args)
