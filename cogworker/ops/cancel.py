"""Cancelling one job by its jid: `cogworker.cancel(jid)`, `cogworker cancel JID`, the job page's button.

The cancel is first noted in the cancel record (store/lua/cancel.lua, "record"), then the job is
looked for where it can be (ops/locate.py: running in a live process, waiting in a queue, the
retry, scheduled or dead set, its status hash):

- waiting (queued, scheduled, retrying): taken off its queue or set atomically, by its exact
  payload, with its locks released and its record entry dropped: it never runs. Counted
  `cancelled` (store/outcomes.py) and its answer kept for CANCEL_KEEP_S in the same step, so a
  cancel whose reply was lost, or asked again, answers the same (never `not_found`). If it moved
  meanwhile (fetched, come due), it is looked for again;
- running: the record stays; the worker running it reads it within about a second and cancels it
  (an `async def` job's task at once, a sync job at its next `raise_if_cancelled()`); the worker
  counts it when it ends;
- finished (in dead, or its status says complete/failed/cancelled): nothing to stop; the record's
  entry is dropped again;
- nowhere: finished without a status to say so, or never existed -- without status tracking the two
  look the same -- or in between places (fetched by a worker and not yet listed as running, on the
  in-progress list of a process that just died). The record stays for CANCEL_KEEP_S, so a worker
  holding it, or fetching it again after recovery, ends it as cancelled instead of running it.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.ops import cancel_shards, locate, places
from cogworker.store import key_guard, keys, outcomes, shards
from cogworker.store.locks import held_locks
from cogworker.store.scripts import Scripts
from cogworker.store.shards import Partition

log = structlog.get_logger("cogworker.cancel")

# How long the cancel record keeps an entry, and how many it keeps at most: long enough for a job
# on a dead process's in-progress list to be recovered (minutes), small enough that a worker reads
# the whole record at start in one command.
CANCEL_KEEP_S = keys.CANCEL_KEEP_S
CANCEL_MAX = 10_000
# A job moving while it is cancelled (fetched, come due) is looked for again, this many times.
ATTEMPTS = 5
# The search resumes from its cursor until every place is read, or this much time has passed.
SEARCH_WALL_S = 10.0

# The cases, and whether the job is stopped: waiting ones are removed; a running one is cancelled.
REMOVED = {"queue": "queued", "scheduled": "scheduled", "retry": "retrying"}
CASES = ("queued", "scheduled", "retrying", "running", "finished", "not_found")
FINISHED_STATUSES = ("complete", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """What `cancel` did. `case`: queued / scheduled / retrying (taken off its queue or set: it never
    runs), running (its worker cancels it), finished (in dead, or its status says it ended), or
    not_found (finished or unknown; see `detail`)."""

    jid: str
    case: str
    detail: str
    job: str | None = None  # the job's registered name, when known
    queue: str | None = None
    processes: list[str] = field(default_factory=list)  # identities running it (case "running")
    searched_all: bool = True  # False: the search ran out of time before reading every place

    @property
    def stopped(self) -> bool:
        """True when the job will not run (removed) or its run is being cancelled."""
        return self.case in REMOVED.values() or self.case == "running"


def check_jid(jid: Any) -> str:
    if not isinstance(jid, str):
        raise TypeError(f"jid must be a str, not {type(jid).__name__}")
    if not locate.valid_jid(jid):
        raise ValueError(f"jid {jid!r} is not a job id (letters, digits and _.:- only, at most 100)")
    return jid


def _run(client: redis.Redis, scripts: Scripts, keys_: list[str], args: list[Any]) -> int:
    reply = scripts.run("cancel", keys_, [*args[:4], time.time(), *args[4:]], client=client)
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "uncounted":
        # Removed; only its count is missing (outcomes.py says why that is logged, never raised).
        log.error("outcome_not_counted", outcome="cancelled", jid=args[0], keys=[reply[1]])
        key_guard.request(client, str(reply[1]))
        return 1
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(client, wrong)
    return int(reply)


def record(client: redis.Redis, scripts: Scripts, jid: str) -> None:
    _run(client, scripts, [keys.CANCELS], [jid, "record", CANCEL_KEEP_S, CANCEL_MAX])


def _forget(client: redis.Redis, scripts: Scripts, jid: str) -> None:
    _run(client, scripts, [keys.CANCELS], [jid, "forget", "", ""])


def _remove(
    client: redis.Redis,
    scripts: Scripts,
    jid: str,
    place: str,
    raw: str,
    payload: Any,
    answer: CancelOutcome,
    partition: Partition | None = None,
) -> CancelOutcome | None:
    """Take the job off `place` and count it, answering `answer`; None when it wasn't there. The
    answer is kept with the removal (cancel.lua), so when the reply is lost it is read back. In the
    sharded layout the job is in `partition`'s slot: cancel_shards.py's steps."""
    locks = [key for key, _owner in held_locks(payload)] if isinstance(payload, dict) else []
    kind = "z" if place in locate.SET_PLACES else "l"
    kept = codec.dumps({"case": answer.case, "job": answer.job, "queue": answer.queue})
    if partition is not None:
        # The partition's answer names the locks too: a cancel asked again after the home step was
        # lost (`_earlier`) releases them then, rather than leaving a unique claim to its TTL.
        kept = codec.dumps({"case": answer.case, "job": answer.job, "queue": answer.queue, "locks": locks})
        where = places.key(places.of_partition(place, partition))
        if not cancel_shards.remove(
            client, scripts, partition, jid, where, kind == "z", raw, kept, CANCEL_KEEP_S
        ):
            return None
        _finish_in_home(client, jid, kept, locks)
        return answer
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    names = [keys.CANCELS, locate.place_key(place), keys.status(jid), keys.cancelled(jid)]
    names += [keys.stat("cancelled"), keys.stat_day("cancelled", day), *locks]
    args = [jid, "remove", kind, raw, kept, CANCEL_KEEP_S, outcomes.DAY_COUNTER_TTL_S]
    try:
        removed = _run(client, scripts, names, args)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        earlier = _earlier(client, jid)
        if earlier is None:
            raise  # not removed, or not known to be: asking again finds the job or this answer
        log.warning("cancel_reply_lost_but_removed", jid=jid, error=str(exc))
        return earlier
    return answer if removed else None


def _finish_in_home(client: redis.Redis, jid: str, kept: str, locks: list[str]) -> None:
    """The home slot's part of a sharded cancel (cancel_shards.finish). The job is off its queue
    already: a failure here is logged, and the next cancel of the jid finishes it."""
    try:
        cancel_shards.finish(client, jid, kept, CANCEL_KEEP_S, locks)
    except redis.RedisError as exc:
        log.warning("cancel_home_step_failed", jid=jid, error=f"{type(exc).__name__}: {exc}")


def _locks_named(kept: str) -> list[str]:
    """The lock keys a partition's answer names (a sharded cancel's `_remove`)."""
    try:
        answer = codec.loads(kept)
    except ValueError:
        return []
    named = answer.get("locks") if isinstance(answer, dict) else None
    return [key for key in named if isinstance(key, str)] if isinstance(named, list) else []


def _earlier(client: redis.Redis, jid: str) -> CancelOutcome | None:
    """The answer of a cancel that took the job off its queue or set, if one did (within
    CANCEL_KEEP_S); None when none did or Redis can't be asked. In the sharded layout a partition's
    answer counts too (its home step is run again: cancel_shards.py)."""
    try:
        kept = client.get(keys.cancelled(jid))
        if kept is None and shards.is_sharded():
            kept = cancel_shards.earlier(client, jid)
            if kept is not None:
                _finish_in_home(client, jid, str(kept), _locks_named(str(kept)))
    except redis.RedisError:
        return None
    try:
        answer = codec.loads(str(kept)) if kept is not None else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("case") not in REMOVED.values():
        return None
    job, queue = answer.get("job"), answer.get("queue")
    return _removed(jid, str(answer["case"]), job if isinstance(job, str) else None,
                    queue if isinstance(queue, str) else None)  # fmt: skip


def _located(client: redis.Redis, scripts: Scripts, jid: str) -> locate.Location:
    """Everything known of `jid`, its search resumed until it has read every place (or time ran out)."""
    where = locate.locate(client, scripts, jid)
    deadline = time.monotonic() + SEARCH_WALL_S
    while (
        where.search is not None
        and not where.found
        and where.search.next is not None
        and time.monotonic() < deadline
    ):
        where = locate.locate(client, scripts, jid, where.search.next)
    return where


def cancel(client: redis.Redis, scripts: Scripts, jid: str) -> CancelOutcome:
    """Cancel the job `jid` (see the module's docstring for each case)."""
    jid = check_jid(jid)
    earlier = _earlier(client, jid)
    if earlier is not None:  # taken off its queue or set by a cancel already: the same answer
        return earlier
    record(client, scripts, jid)
    where = _located(client, scripts, jid)
    for _ in range(ATTEMPTS):
        outcome = _act(client, scripts, jid, where)
        if outcome is not None:
            return outcome
        where = _located(client, scripts, jid)  # it moved between the search and its removal
    return _not_found(jid, where, moving=True)


def _act(client: redis.Redis, scripts: Scripts, jid: str, where: locate.Location) -> CancelOutcome | None:
    """The outcome for what `where` found; None when the job was no longer where it was found."""
    status = where.status
    if where.running:
        first = where.running[0].job
        return CancelOutcome(
            jid,
            "running",
            "running: its worker cancels it within about a second (an async job's task at once, a sync "
            "job when it next calls current_job().raise_if_cancelled()) and counts it cancelled",
            job=first.job,
            queue=first.queue,
            processes=[r.identity for r in where.running],
        )
    search = where.search
    for entry in search.entries if search is not None else []:
        if entry.set == "dead":
            _forget(client, scripts, jid)
            return CancelOutcome(
                jid, "finished", "finished: it is in the dead set (failed for good); nothing to cancel",
                job=entry.job, queue=entry.queue,
            )  # fmt: skip
        answer = _removed(jid, REMOVED[entry.set], entry.job, entry.queue)
        return _remove(client, scripts, jid, entry.set, entry.raw, entry.payload, answer, entry.partition)
    for queued in search.queued if search is not None else []:
        name = queued.payload.get("class")
        answer = _removed(jid, "queued", name if isinstance(name, str) else None, queued.queue)
        place = locate.QUEUE_PLACE + queued.queue
        return _remove(client, scripts, jid, place, queued.raw, queued.payload, answer, queued.partition)
    if status.get("status") in FINISHED_STATUSES:
        _forget(client, scripts, jid)
        return CancelOutcome(
            jid, "finished", f"finished: its status says {status['status']}; nothing to cancel",
            job=status.get("class"), queue=status.get("queue"),
        )  # fmt: skip
    return _not_found(jid, where, moving=False)


def _removed(jid: str, case: str, job: str | None, queue: str | None) -> CancelOutcome:
    where = {"queued": f"queue {queue}", "scheduled": "the scheduled set", "retrying": "the retry set"}
    return CancelOutcome(jid, case, f"{case}: taken off {where[case]}; it will not run", job=job, queue=queue)


def _not_found(jid: str, where: locate.Location, *, moving: bool) -> CancelOutcome:
    searched_all = where.search is None or where.search.next is None
    why = (
        "it kept moving while it was looked for"
        if moving
        else "finished or unknown (without status tracking the two look the same)"
        if searched_all
        else f"not in the places searched within {SEARCH_WALL_S:.0f}s"
    )
    return CancelOutcome(
        jid,
        "not_found",
        f"not found ({why}); the cancel is kept for {CANCEL_KEEP_S // 3600} h, so a worker that holds "
        "it or fetches it again (after a crash) does not run it",
        job=where.status.get("class"),
        queue=where.status.get("queue"),
        searched_all=searched_all,
    )
