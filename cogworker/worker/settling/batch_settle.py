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
from redis.exceptions import NoScriptError

from cogworker.settings_fields import SettingsFields
from cogworker.store import batch_scripts, key_guard, keys, shards
from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import on_list

log = structlog.get_logger("cogworker.batch")


def _one_slot_only() -> None:
    """These scripts count a member in the slot its ack runs in: the one-slot layout's. The sharded
    layout's ends go through its partition's outbox (batch_shard_acks.py); reaching here there is a
    bug, stopped loudly rather than a count lost or sent to the wrong slot."""
    if shards.is_sharded():
        raise RuntimeError("a batch member's one-slot ack or filing was called in the sharded layout")


@dataclass(slots=True)
class PendingAck:
    raw: str
    job: dict[str, Any]
    outcome: str
    listed: str  # the in-progress list the member is on ("": basic fetch popped it)


class MemberAcks:
    """One worker's acknowledgements of batch members: sent at once on the job's thread (one round
    trip, as a filing is), kept and retried when Redis fails."""

    def __init__(self, client: redis.Redis, settings: SettingsFields, outages: Outages) -> None:
        _one_slot_only()
        self._client = client
        self._settings = settings
        self._outages = outages
        self._pending: list[PendingAck] = []  # failed to send: retried with the filings
        self._queued: list[PendingAck] = []  # waiting for the send in progress to end
        self._sending: list[PendingAck] | None = None  # None: no send in progress
        self._loaded = False
        self._lock = threading.Lock()

    def ack(self, raw: str, job: dict[str, Any], outcome: str, listed: str) -> None:
        """Send the ack, with those other job threads queued meanwhile, in one pipeline (a group
        commit: under load one round trip carries many members' scripts, each atomic on its own).
        The thread that finds no send in progress sends; the others only queue theirs."""
        with self._lock:
            self._queued.append(PendingAck(raw, job, outcome, listed))
            if self._sending is not None:
                return
            self._sending = []
        while True:
            with self._lock:
                items, self._queued = self._queued, []
                self._sending = items if items else None
            if not items:
                return
            failed = self._send(items)
            with self._lock:
                self._pending += failed

    def _send(self, items: list[PendingAck]) -> list[PendingAck]:
        """One pipeline of batch_ack.lua calls; returns the items not acknowledged (kept)."""
        try:
            script = batch_scripts.script("batch_ack")
            if not self._loaded:
                self._client.script_load(script.script)
                self._loaded = True
            pipe = self._client.pipeline(transaction=False)
            for item in items:
                script_keys, args = self._call(item)
                pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)  # type: ignore[no-untyped-call]
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:
            self._report(exc)
            return items
        failed = []
        for item, reply in zip(items, replies, strict=True):
            wrong = None if isinstance(reply, Exception) else key_guard.script_wrong_type(reply)
            if isinstance(reply, Exception) or wrong is not None:
                if isinstance(reply, NoScriptError):
                    self._loaded = False  # Redis lost its scripts (a restart): loaded again next time
                self._report(
                    reply if isinstance(reply, Exception) else key_guard.WrongTypeKey(str(wrong), None)
                )
                failed.append(item)
            elif not reply:
                log.info(
                    "settle_skipped_requeued_job",
                    jid=item.job.get("jid"),
                    note="another process runs its copy",
                )
        if len(failed) < len(items):
            self._outages.recovered("Settle")
        return failed

    def _call(self, item: PendingAck) -> tuple[list[str], list[Any]]:
        day = time.strftime("%Y-%m-%d", time.gmtime())
        jid = str(item.job.get("jid") or "")
        layout_keys, layout_args = batch_scripts.layout(
            item.job, item.outcome, "", self._settings.batch_ttl_s
        )
        if item.outcome != "ok":
            layout_args[1:3] = ["failed", f"ended without running ({item.outcome})"]
        listed, payload = on_list(item.listed, item.raw, keys.STAT_PROCESSED)
        own = [listed, keys.STAT_PROCESSED, keys.stat_processed_day(day), keys.orphanings(jid)]
        return [*own, *layout_keys], [payload, *layout_args]

    def _report(self, exc: Exception) -> None:
        if isinstance(exc, key_guard.WrongTypeKey):
            log.error("batch_ack_stopped_by_wrong_type_key", key=exc.key)
            key_guard.request(self._client, exc.key)
            return
        self._outages.report("Settle", exc)

    def retry(self) -> bool:
        """Send the kept acknowledgements; False when some are still kept (Redis still fails)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return True
        failed = self._send(pending)
        with self._lock:
            self._pending[:0] = failed
        return not failed

    @property
    def pending(self) -> int:
        """Acknowledgements that failed and wait for `retry`."""
        with self._lock:
            return len(self._pending)

    def holding(self) -> list[str]:
        """Payloads whose ack is queued, being sent or kept: still on the in-progress list."""
        with self._lock:
            return [item.raw for item in (*self._queued, *(self._sending or ()), *self._pending)]


def run_filed(
    client: redis.Redis,
    settings: SettingsFields,
    name: str,
    script_keys: list[str],
    args: list[Any],
    job: dict[str, Any],
) -> Any:
    """Run the filing script `name` (settle or file_unsettled) of a batch member going to dead, with
    its death counted in its batch in the same script."""
    _one_slot_only()
    error = f"{job.get('error_class') or ''}: {job.get('error_message') or ''}"[:1000]
    layout_keys, layout_args = batch_scripts.layout(job, "dead", error, settings.batch_ttl_s)
    return batch_scripts.run(client, f"filed:{name}", script_keys + layout_keys, args + layout_args)
