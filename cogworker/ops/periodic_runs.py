"""A periodic entry's last slots and what became of each: enqueued (with its jid and, when known,
how the job ended), skipped, missed or paused.

The ticker records every slot it decides in the entry's run history (`cogworker:periodic:runs:<name>`,
written by store/lua/periodic.lua with the slot's claim). Slots that no process was there to decide
leave no record of their own: they are read from the gaps, between a record and the slot handled
before it, and between the last slot handled and the slot due now. Such a gap is one "missed" row,
however many slots it holds, so a week of downtime of an every-second entry is one line.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.api.periodic import RUNS_KEPT, Entry
from cogworker.store import keys

# What the script records, as the operator reads it: (outcome, why).
OUTCOMES = {
    "enqueued": ("enqueued", ""),
    "running": ("skipped", "the previous run was still queued or running (until_executed)"),
    "stopped": ("skipped", "a client middleware stopped the push (a unique job's duplicate?)"),
    "missed": ("missed", "later than COGWORKER_PERIODIC_GRACE_S when a process came back: not run"),
    "paused": ("paused", "the entry was paused: nothing enqueued"),
}
NO_PROCESS = "no process was running this entry to enqueue it"
# Slots counted in one gap at most (each is a croniter step, 0.1 to 0.3 ms).
GAP_CAP = 100
# A job status (api/job_status.py) as the end state of a run.
END_STATES = {"retrying": "in retry", "failed": "dead"}


@dataclass(frozen=True, slots=True)
class Run:
    slot: float  # the slot (the most recent one, for a gap of several)
    outcome: str  # "enqueued", "skipped", "missed" or "paused"
    detail: str  # why, in words ("" for an enqueued slot)
    jid: str | None = None  # the job enqueued for the slot
    holder: str | None = None  # skipped as still running: the run that was
    at: float | None = None  # when it was decided (Redis's clock); None for a slot no process handled
    count: int = 1  # slots in a gap read as missed
    more: bool = False  # the gap holds more than `count` (GAP_CAP) slots
    state: str | None = None  # the enqueued job's status when it tracks one ("in retry", "dead", ...)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Slots:
    """An entry's slots, by the ticker's rules (api/periodic.py `Entry`), from one croniter moved
    around: building one costs about a millisecond, and a page reads a dozen gaps."""

    def __init__(self, entry: Entry) -> None:
        from croniter import croniter  # ~30 ms to import: only when a page needs it

        self.zone = entry.zone
        self.it = croniter(entry.cron, dt.datetime.fromtimestamp(0, self.zone))

    def latest(self, at: float) -> int:
        """The most recent slot at or before `at` (Entry.slot_at)."""
        self.it.set_current(dt.datetime.fromtimestamp(int(at) + 1, self.zone))
        return int(self.it.get_prev(dt.datetime).timestamp())

    def between(self, after: int, before: int, cap: int) -> list[int]:
        """The slots strictly between two times, oldest first, at most `cap` (Entry.slots_between)."""
        self.it.set_current(dt.datetime.fromtimestamp(after, self.zone))
        found: list[int] = []
        while len(found) < cap:
            slot = int(self.it.get_next(dt.datetime).timestamp())
            if slot >= before:
                break
            found.append(slot)
        return found


def slots_of(entry: Entry | None) -> Slots | None:
    if entry is None:
        return None
    try:
        return Slots(entry)
    except (ValueError, KeyError, TypeError, OverflowError):
        return None


def _gap(slots: Slots | None, after: float, before: float, *, inclusive: bool) -> Run | None:
    """The slots after `after` and before `before` (and `before` itself when `inclusive`) as one
    missed row, or None when there are none (or the schedule can't be read here). At most GAP_CAP
    are counted: a day without workers is 86,400 slots of an every-second entry."""
    if slots is None or after < 0:
        return None
    try:
        latest = slots.latest(before if inclusive else before - 1)
        if latest <= after:
            return None
        found = slots.between(int(after), latest + 1, GAP_CAP)
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    if not found:
        return None
    more = len(found) >= GAP_CAP
    count = f"{len(found)}{'+' if more else ''} slots" if len(found) > 1 else "this slot"
    return Run(slot=latest, outcome="missed", detail=f"{count}: {NO_PROCESS}", count=len(found), more=more)


def parse(raw: list[str], slots: Slots | None = None) -> list[Run]:
    """The recorded runs, newest first, with the gaps between them as missed rows when `slots` is
    given (an entry's own page; the listing, which shows only the newest, leaves them out)."""
    found: list[Run] = []
    for text in raw:
        record = codec.loads_dict(text) or {}
        slot = _float(record.get("slot"))
        if slot is None:
            continue
        outcome, detail = OUTCOMES.get(str(record.get("outcome")), ("unknown", str(record.get("outcome"))))
        jid = record.get("jid")
        holder = record.get("holder")
        found.append(
            Run(
                slot=slot,
                outcome=outcome,
                detail=detail,
                jid=jid if isinstance(jid, str) and jid else None,
                holder=holder if isinstance(holder, str) and holder else None,
                at=_float(record.get("at")),
            )
        )
        previous = _float(record.get("previous"))
        gap = _gap(slots, previous, slot, inclusive=False) if previous is not None else None
        if gap is not None:
            found.append(gap)
    return found[:RUNS_KEPT]


def due_unhandled(
    slots: Slots | None, last_slot: float | None, now: float, settle_s: float, current: float
) -> Run | None:
    """The slots due since the last one handled that are at least `settle_s` late (a running ticker
    would have handled them by then), as one missed row dated at the latest of them. `current` is
    the slot due at `now`: when it was handled, nothing is to be read."""
    if slots is None or last_slot is None or current <= last_slot:
        return None
    return _gap(slots, last_slot, now - settle_s, inclusive=True)


def with_end_states(client: redis.Redis, runs: list[list[Run]]) -> list[list[Run]]:
    """The enqueued runs with their job's status, for the jobs that track one (one round trip)."""
    jids = sorted({run.jid for entry_runs in runs for run in entry_runs if run.jid})
    if not jids:
        return runs
    pipe = client.pipeline(transaction=False)
    for jid in jids:
        pipe.hget(keys.status(jid), "status")
    states = dict(zip(jids, cast(list[str | None], pipe.execute()), strict=True))

    def ended(run: Run) -> Run:
        state = states.get(run.jid) if run.jid else None
        if not state:
            return run
        return replace(run, state=END_STATES.get(state, state))

    return [[ended(run) for run in entry_runs] for entry_runs in runs]
