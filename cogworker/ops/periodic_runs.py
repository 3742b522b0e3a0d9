"""A periodic entry's last slots and what became of each: enqueued (with its jid and, when known,
how the job ended), skipped, missed or paused.

The ticker records every slot it decides in the entry's run history (`cogworker:periodic:runs:<name>`,
written by store/lua/periodic.lua with the slot's claim). Slots that no process was there to decide
leave no record of their own: they are read from the gaps, between a record and the slot handled
before it, and between the last slot handled and the slot due now. Such a gap is one "missed" row,
however many slots it holds, so a week of downtime of an every-second entry is one line.
"""

from __future__ import annotations

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
# Slots counted in one gap at most (each is a croniter step, some 20 µs).
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


def _gap(entry: Entry | None, after: float, before: float, *, inclusive: bool) -> Run | None:
    """The slots after `after` and before `before` (and `before` itself when `inclusive`) as one
    missed row, or None when there are none (or the schedule can't be read here). At most GAP_CAP
    are counted: a day without workers is 86,400 slots of an every-second entry."""
    if entry is None or after < 0:
        return None
    try:
        latest = entry.slot_at(before if inclusive else before - 1)
        if latest <= after:
            return None
        slots = entry.slots_between(int(after), latest + 1, cap=GAP_CAP)
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    if not slots:
        return None
    more = len(slots) >= GAP_CAP
    count = f"{len(slots)}{'+' if more else ''} slots" if len(slots) > 1 else "this slot"
    return Run(slot=latest, outcome="missed", detail=f"{count}: {NO_PROCESS}", count=len(slots), more=more)


def parse(raw: list[str], entry: Entry | None) -> list[Run]:
    """The recorded runs, newest first, with the gaps between them as missed rows."""
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
        gap = _gap(entry, previous, slot, inclusive=False) if previous is not None else None
        if gap is not None:
            found.append(gap)
    return found[:RUNS_KEPT]


def due_unhandled(entry: Entry | None, last_slot: float | None, now: float, settle_s: float) -> Run | None:
    """The slots due since the last one handled that are at least `settle_s` late (a running ticker
    would have handled them by then), as one missed row dated at the latest of them."""
    if entry is None or last_slot is None:
        return None
    return _gap(entry, last_slot, now - settle_s, inclusive=True)


def fetch(client: redis.Redis, names: list[str]) -> list[list[str]]:
    """Every named entry's recorded runs, newest first, in one round trip."""
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.lrange(keys.periodic_runs(name), 0, RUNS_KEPT - 1)
    return cast(list[list[str]], pipe.execute())


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
