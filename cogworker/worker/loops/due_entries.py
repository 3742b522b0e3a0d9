"""The poller's move of one set's due entries (poller.py): read in batches of BATCH by score, each batch
claimed and pushed by one graduate_batch.lua call, an entry that is not a job filed in dead
(bury.lua). A key of the wrong type met on the way is handed to `guard_now` (the poller's key guard)
and what it stopped stays due for the next poll.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
import structlog

from cogworker import codec
from cogworker.api import death, retry
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard
from cogworker.store.redis_context import RedisContext
from cogworker.worker.loops.graduation import SetPlace

log = structlog.get_logger("cogworker.poller")

# Due entries read per ZRANGEBYSCORE while moving one set's.
BATCH = 100


class DueEntries:
    def __init__(self, ctx: RedisContext, guard_now: Callable[[list[str]], None]) -> None:
        self._ctx = ctx
        self._settings: SettingsFields = ctx.settings
        self._guard_now = guard_now

    def enqueue_due_in(self, place: SetPlace, now: float) -> int:
        """Every entry of one set due at `now`, in batches of BATCH."""
        moved = 0
        while True:
            due = self.due(place, now)
            if not due:
                break
            graduated, wrong = self.graduate(place, due)
            moved += graduated
            if wrong:
                self._guard_now(wrong)
                break  # what is left stays due: the next poll moves it
            if len(due) < BATCH:
                break
        return moved

    def due(self, place: SetPlace, now: float) -> list[str]:
        """Up to BATCH due entries; none when the set itself has the wrong type (the guard moves it
        aside now, so the other set is still served and the next poll reads a sorted set again)."""
        try:
            due = place.client.zrangebyscore(place.set_key, "-inf", now, start=0, num=BATCH)
        except redis.ResponseError as exc:
            if not key_guard.is_wrong_type(exc):
                raise
            self._guard_now([place.set_key])
            return []
        return [str(raw) for raw in due]

    def graduate(self, place: SetPlace | str, entries: list[str]) -> tuple[int, list[str]]:
        """Returns how many moved, and the keys of the wrong type that stopped others. The batch
        moves in one graduate_batch.lua call: entries claimed and pushed in one step, as graduate.lua
        does for one. A lost reply is a failed poll: the next one finds the moved entries gone from
        the set and moves the rest. `place` as a set's key: the one-slot layout's set."""
        if isinstance(place, str):
            place = SetPlace.one_slot(self._ctx, place)
        invalid: list[str] = []
        queue_index: dict[str, int] = {}  # queue name -> its 1-based place among the script's queues
        moves: list[str | int] = []
        now = time.time()
        for raw in entries:
            job = codec.loads_dict(raw)
            queue = job.get("queue") if job is not None else None
            if job is None or not isinstance(queue, str) or not queue:
                invalid.append(raw)
                continue
            if place.partition is not None:
                # Into the queue of the partition whose set holds it, whatever queue the payload
                # names (an old or hand-written entry): the script can reach no other.
                queue = place.partition.queue
            job.pop("at", None)
            job["enqueued_at"] = now
            try:
                text = codec.dumps(job)
            except codec.EncodeError:
                # JSON orjson reads but won't write (nested past 254 levels): never a job it can
                # run, and left here it would fail every poll. Dead keeps it, as it was.
                invalid.append(raw)
                continue
            moves += [raw, text, queue_index.setdefault(queue, len(queue_index) + 1)]
        moved, wrong = 0, []
        if moves:
            reply = place.scripts.run(
                "graduate_batch",
                [place.set_key, place.registry, place.wake, *(place.queue_key(name) for name in queue_index)],
                [*queue_index, *moves],
                client=place.client,
            )
            moved = int(reply[0])
            wrong = [key.decode() if isinstance(key, bytes) else str(key) for key in reply[1:]]
        for raw in invalid:
            key = self.bury(place, raw)
            if key is not None and key not in wrong:
                wrong.append(key)
        return moved, wrong

    def bury(self, place: SetPlace, raw: str) -> str | None:
        """File an entry that can't be enqueued in dead; returns a key of the wrong type that
        stopped it (nothing moved then), else None."""
        what = "not valid UTF-8" if not codec.is_utf8(raw) else "not a job (a JSON object with a queue)"
        filing = retry.unreadable(raw, None, f"{what} in {place.set_key}")
        text = codec.dumps(filing.payload)
        reply = place.scripts.run(
            "bury",
            [place.set_key, place.dead, place.stat_failed, place.deaths],
            # Counted, no dead-set cap (as before), and its death notice (api/death.py).
            [
                raw,
                filing.score,
                text,
                "1",
                0,
                0,
                death.notice(death.UNREADABLE, text),
                self._settings.death_notices_max,
            ],
            client=place.client,
        )
        wrong = key_guard.script_wrong_type(reply)
        if wrong is None and reply:
            log.error("unreadable_entry_to_dead", source=place.set_key, entry=codec.escape(raw[:200]))
        return wrong
