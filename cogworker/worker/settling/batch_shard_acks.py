"""Settling batch members in the sharded layout (store/batch_ends.py): a member's (or callback's)
acknowledgement in its partition's slot writes its end into that slot's outbox in the same script
(member_ack.lua + batch_end.lua); the entry is then moved at once (counted in the batch in the home
slot, the callbacks a decision fires pushed). What batch_settle.py's MemberAcks is in the one-slot
layout, with the same contract: an ack that fails is kept and retried with the filings.

The entry's id is fixed by the member, so whatever the ack's reply (1: acknowledged now; 0: already
acknowledged by an earlier call whose reply was lost, or taken by recovery) the entry is moved if it
is there. A move that fails leaves the entry for a worker's sweep (store/outbox.py): the ack stands.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker.settings_fields import SettingsFields
from cogworker.store import batch_ends, key_guard, outbox, shards
from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import on_list
from cogworker.worker.settling import shard_route
from cogworker.worker.settling.shard_route import ShardRoute

log = structlog.get_logger("cogworker.batch")


@dataclass(slots=True)
class PendingAck:
    raw: str
    job: dict[str, Any]
    outcome: str
    listed: str  # the in-progress list the member is on ("": basic fetch popped it)


def outcome_of(outcome: str) -> tuple[str, str]:
    """The end counted in the batch for an ack's outcome: "ok", or "failed" for one ended unrun."""
    if outcome == "ok":
        return "ok", ""
    return "failed", f"ended without running ({outcome})"


def move(
    route: ShardRoute | None, settings: SettingsFields, partition: shards.Partition, entry_id: str
) -> None:
    """Move the member's entry now; a failure leaves it to a sweep (logged, not raised), as does a
    process with no route (one that settles nothing itself: the sweep's 10 s is its delay)."""
    if route is None:
        return
    try:
        outbox.Mover(route.clients, settings).move_ids(partition, [entry_id])
    except (redis.RedisError, key_guard.WrongTypeKey) as exc:
        log.warning("batch_end_move_failed", entry=entry_id, error=f"{type(exc).__name__}: {exc}",
                    note="a worker's sweep moves it")  # fmt: skip


class ShardedMemberAcks:
    """One sharded worker's acknowledgements of batch members, sent on the job's thread."""

    def __init__(self, route: ShardRoute, settings: SettingsFields, outages: Outages) -> None:
        self._route = route
        self._settings = settings
        self._outages = outages
        self._pending: list[PendingAck] = []  # failed to send: retried with the filings
        self._sending: list[PendingAck] = []
        self._lock = threading.Lock()

    def ack(self, raw: str, job: dict[str, Any], outcome: str, listed: str) -> None:
        item = PendingAck(raw, job, outcome, listed)
        with self._lock:
            self._sending.append(item)
        sent = self._send(item)
        with self._lock:
            self._sending.remove(item)
            if not sent:
                self._pending.append(item)

    def write(self, item: PendingAck) -> tuple[Any, shards.Partition, str]:
        """The ack and its entry in one script, in the member's partition: (reply, partition, entry id).
        The entry is not moved here (`_send` moves it)."""
        partition = self._route.partition_of(item.listed, item.raw)
        jid = str(item.job.get("jid") or "")
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        processed = shards.stat(partition, "processed")
        listed, payload = on_list(item.listed, item.raw, processed)
        own = [
            listed,
            processed,
            shards.stat_day(partition, "processed", day),
            shards.orphanings(partition, jid),
        ]
        outcome, error = outcome_of(item.outcome)
        client = self._route.client(partition)
        reply, entry_id = batch_ends.run_end(
            client, "member_ack", partition, own, [payload], item.job, outcome, error
        )
        return reply, partition, entry_id

    def _send(self, item: PendingAck) -> bool:
        """The ack and its entry written, then the entry moved; False when the ack failed (kept)."""
        try:
            reply, partition, entry_id = self.write(item)
            wrong = key_guard.script_wrong_type(reply)
            if wrong is not None:
                raise key_guard.WrongTypeKey(wrong, None)
        except Exception as exc:
            self._report(exc)
            return False
        self._outages.recovered("Settle")
        if not reply:
            log.info(
                "settle_skipped_requeued_job",
                jid=item.job.get("jid"),
                note="acknowledged before (its reply lost), or run by another copy",
            )
        # Whatever the reply: an earlier call whose reply was lost may have written the entry.
        move(self._route, self._settings, partition, entry_id)
        return True

    def _report(self, exc: Exception) -> None:
        if isinstance(exc, key_guard.WrongTypeKey):
            log.error("batch_ack_stopped_by_wrong_type_key", key=exc.key)
            key_guard.request(self._route.clients.home, exc.key)  # reported in the home slot
            return
        self._outages.report("Settle", exc)

    def retry(self) -> bool:
        """Send the kept acknowledgements; False when some are still kept (Redis still fails)."""
        with self._lock:
            pending, self._pending = self._pending, []
        failed = [item for item in pending if not self._send(item)]
        with self._lock:
            self._pending[:0] = failed
        return not failed

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def holding(self) -> list[str]:
        """Payloads whose ack is being sent or kept: still on the in-progress list."""
        with self._lock:
            return [item.raw for item in (*self._sending, *self._pending)]


def end_dead(
    client: redis.Redis,
    settings: SettingsFields,
    ending: str,
    partition: shards.Partition,
    script_keys: list[str],
    args: list[Any],
    job: dict[str, Any],
) -> Any:
    """A batch member's dead filing in its partition (`ending`: "settle", "file_unsettled",
    "swap_dead"), its end written to the partition's outbox by the same script, then moved. Returns
    the filing script's reply."""
    error = f"{job.get('error_class') or ''}: {job.get('error_message') or ''}"
    reply, entry_id = batch_ends.run_end(client, ending, partition, script_keys, args, job, "dead", error)
    if key_guard.script_wrong_type(reply) is None:
        move(shard_route.current(), settings, partition, entry_id)
    return reply
