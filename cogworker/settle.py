"""Settling fetched jobs: acknowledgements (batched into the next fetch) and filings into
retry/dead, with what happens when Redis is failing at that moment.

A filing that fails is kept and retried; at shutdown it is handed to Redis (cogworker:unsettled)
for another process to file. If even that fails, the job is still on this process's in-progress
list, so recovery runs it again: a job is never lost, at worst it runs twice.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker import codec, keys
from cogworker.connection import is_unavailable
from cogworker.context import RedisContext
from cogworker.locks import Locks
from cogworker.retry import Filing
from cogworker.scripts import Scripts
from cogworker.settings import Settings

log = structlog.get_logger("cogworker.settle")

FILEABLE_SETS = (keys.RETRY, keys.DEAD, keys.SCHEDULE)


@dataclass(slots=True)
class PendingFiling:
    raw: str
    filing: Filing


class Settler:
    def __init__(self, ctx: RedisContext, in_progress_key: str) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._locks = ctx.locks
        self._in_progress = in_progress_key
        self._acks: deque[tuple[str, str]] = deque()
        self._pending: list[PendingFiling] = []
        self._lock = threading.Lock()

    # Acknowledgements: taken by the fetcher on its next round trip.
    def ack(self, raw: str, jid: str) -> None:
        self._acks.append((raw, jid))

    def take_acks(self) -> list[tuple[str, str]]:
        taken: list[tuple[str, str]] = []
        while self._acks:
            taken.append(self._acks.popleft())
        return taken

    def return_acks(self, acks: list[tuple[str, str]]) -> None:
        """A fetch that failed hands its acknowledgements back, to go with the next one."""
        self._acks.extendleft(reversed(acks))

    @property
    def pending_acks(self) -> int:
        return len(self._acks)

    # Filings into retry/dead.
    def file(self, raw: str, filing: Filing) -> bool:
        """File now; on a Redis failure keep it for later. True when it was filed now."""
        try:
            filed = self._file_now(raw, filing)
        except Exception as exc:
            self._outages.report("Settle", exc)
            with self._lock:
                self._pending.append(PendingFiling(raw, filing))
            return False
        self._outages.recovered("Settle")
        if filed and filing.dead:
            self._locks.release_terminal(filing.payload)
        return True

    def _file_now(self, raw: str, filing: Filing) -> bool:
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        dead = filing.dead
        jid = str(filing.payload.get("jid") or "")
        filed = self._scripts.run(
            "settle",
            [
                self._in_progress,
                filing.set_key,
                keys.STAT_FAILED,
                keys.stat_failed_day(day),
                keys.orphanings(jid),
            ],
            [
                raw,
                filing.score,
                codec.dumps(filing.payload),
                "1",
                self._settings.dead_max_jobs if dead else 0,
                time.time() - self._settings.dead_timeout_s,
            ],
            client=self._client,
        )
        return bool(filed)

    def retry_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for index, item in enumerate(pending):
            try:
                filed = self._file_now(item.raw, item.filing)
            except Exception as exc:
                self._outages.report("Settle", exc)
                with self._lock:
                    self._pending[:0] = pending[index:]
                return
            if filed and item.filing.dead:
                self._locks.release_terminal(item.filing.payload)
        if pending:
            self._outages.recovered("Settle")

    @property
    def pending_filings(self) -> int:
        with self._lock:
            return len(self._pending)

    def hand_over(self) -> int:
        """At shutdown: give unfiled filings to Redis for another process. Returns how many remain."""
        with self._lock:
            pending, self._pending = self._pending, []
        left: list[PendingFiling] = []
        for item in pending:
            record = codec.dumps(
                {"set": item.filing.set_key, "score": item.filing.score, "payload": item.filing.payload}
            )
            try:
                self._scripts.run(
                    "handover", [keys.UNSETTLED, self._in_progress], [record, item.raw], client=self._client
                )
            except Exception as exc:
                if not is_unavailable(exc):
                    log.error("handover_failed", error=f"{type(exc).__name__}: {exc}")
                left.append(item)
        if left:
            log.error(
                "unsettled_jobs_left_in_progress",
                count=len(left),
                note="Redis is unreachable: they stay on the in-progress list and will run again",
            )
        return len(left)


def file_unsettled(client: redis.Redis, scripts: Scripts, settings: Settings, locks: Locks) -> int:
    """File the records stopping processes handed over. A record that can't be filed (not JSON, or
    naming a set that isn't one of ours) is quarantined for a human with a TTL, so it neither blocks
    the records behind it nor is silently deleted."""
    filed = 0
    for record in client.lrange(keys.UNSETTLED, 0, 99):
        entry = codec.loads_dict(record)
        valid = (
            entry is not None
            and entry.get("set") in FILEABLE_SETS
            and isinstance(entry.get("score"), int | float)
            and isinstance(entry.get("payload"), dict)
        )
        if not valid or entry is None:
            quarantine_head(client, settings, keys.UNSETTLED, str(record), "unsettled")
            continue
        payload: dict[str, Any] = entry["payload"]
        done = scripts.run(
            "file_unsettled",
            [keys.UNSETTLED, entry["set"], keys.orphanings(str(payload.get("jid") or ""))],
            [record, entry["score"], codec.dumps(payload)],
            client=client,
        )
        if done:
            filed += 1
            if entry["set"] == keys.DEAD:
                locks.release_terminal(payload)
    return filed


def quarantine_head(client: redis.Redis, settings: Settings, list_key: str, record: str, what: str) -> None:
    """Move one unusable record aside (its own key, with a TTL) and log it for a human."""
    target = keys.quarantine(f"{what}:{time.time():.6f}")
    pipe = client.pipeline(transaction=True)
    pipe.lrem(list_key, 1, record)
    pipe.set(target, record, ex=int(settings.quarantine_ttl_s))
    pipe.execute()
    log.error("record_quarantined", source=list_key, key=target, record=record[:200])
