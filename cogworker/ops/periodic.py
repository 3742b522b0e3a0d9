"""Periodic entries as Redis knows them: their schedule, next and last slot, their last runs
(ops/periodic_runs.py), "enqueue now", and pause/resume.

Entries are declared in code (cogworker/api/periodic.py) and each worker's ticker writes their
registration to `cogworker:periodic:entries` (store/lua/periodic.lua), so what is listed here is what
the running fleet schedules, read without importing the app. The next slot is computed with the
same Entry methods the ticker uses, in the entry's time zone, from Redis's clock.

A paused entry is a member of `cogworker:periodic:paused`: the ticker reads that set with each slot's
claim (store/lua/periodic.lua), records the slot as paused and enqueues nothing. Pausing and resuming
are single set writes, idempotent, so one sent again after a lost reply does no harm.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.api.decorator import JobFunction
from cogworker.api.periodic import RUNS_KEPT, Entry
from cogworker.ops import NotFound, OpsError, redis_time
from cogworker.ops.enqueue import Enqueued, enqueue
from cogworker.ops.periodic_runs import Run, due_unhandled, parse, slots_of, with_end_states
from cogworker.settings import Settings
from cogworker.store import keys


@dataclass(frozen=True, slots=True)
class PeriodicEntry:
    name: str
    job: str
    cron: str
    tz: str
    queue: str
    until_executed: bool
    # None when the registration carries no arguments: written by a worker older than this field.
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    next_slot: float | None  # None when the cron or time zone can't be read here (see `problem`)
    last_slot: float | None  # the last slot handled (enqueued, skipped or missed)
    first_seen: float | None
    running_jid: str | None  # until_executed: the run holding the entry's running lock
    problem: str | None  # what is wrong with the registration, shown instead of a next slot
    paused: bool = False
    runs: tuple[Run, ...] = ()  # the last slots, newest first (missed ones read from the gaps)

    @property
    def last_run(self) -> Run | None:
        """What became of the most recent slot (None before the first one after registration)."""
        return self.runs[0] if self.runs else None


def _not_callable(*args: Any, **kwargs: Any) -> None:
    """The job function of an entry rebuilt from Redis: only its schedule is used here."""
    raise RuntimeError("an entry read from Redis has no job function to call")


def schedule(cron: str, tz: str) -> Entry:
    """An Entry with only a schedule, to compute slots with the ticker's own rules."""
    return Entry("", JobFunction(_not_callable, "", {}), cron, tz)


def next_slot(cron: str, tz: str, now: float) -> int:
    """The first slot after `now`, by the same rules as the ticker (api/periodic.py `Entry`)."""
    entry = schedule(cron, tz)
    return entry.next_after(entry.slot_at(now))


def settle_s(settings: Settings) -> float:
    """How late a due slot may be before it reads as missed: by then a running ticker would have
    handled it (it checks every `periodic_check_interval_s`, at a poll)."""
    return 2 * max(settings.poll_interval_s, settings.periodic_check_interval_s) + 1.0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _arguments(registration: dict[str, Any]) -> tuple[list[Any] | None, dict[str, Any] | None]:
    text = registration.get("arguments")
    decoded = codec.loads_dict(text) if isinstance(text, str) else None
    if decoded is None:
        return None, None
    args, kwargs = decoded.get("args"), decoded.get("kwargs")
    return (args if isinstance(args, list) else []), (kwargs if isinstance(kwargs, dict) else {})


# The default `settle_s` (see settle_s()): the defaults' poll and check intervals, with room.
DEFAULT_SETTLE_S = 11.0


@dataclass(frozen=True, slots=True)
class _Extra:
    """What is read of an entry besides its registration."""

    running: str | None = None
    paused: bool = False
    runs: tuple[str, ...] = ()
    settle_s: float = 0.0
    gaps: bool = False  # read the gaps between the recorded runs (an entry's own page)


def _entry(name: str, raw: str, now: float, extra: _Extra) -> PeriodicEntry:
    registration = codec.loads_dict(raw) or {}
    cron, tz = str(registration.get("cron") or ""), str(registration.get("tz") or "UTC")
    args, kwargs = _arguments(registration)
    problem, upcoming, entry, current = None, None, None, 0
    if not registration:
        problem = "the registration is not a JSON object"
    else:
        try:
            entry = schedule(cron, tz)
            current = entry.slot_at(now)
            upcoming = float(entry.next_after(current))
        # Redis's copy may come from another version's worker, or have been edited: a cron or a
        # zone this host can't read is shown as a problem, not a failed page.
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            problem = f"can't compute the next slot of {cron!r} in {tz!r}: {exc}"
            entry = None
    last_slot = _number(registration.get("last_slot"))
    # Only when there is something to read: a croniter costs a millisecond.
    late = last_slot is not None and current > last_slot
    slots = slots_of(entry) if extra.gaps or late else None
    runs = parse(list(extra.runs), slots if extra.gaps else None)
    unhandled = due_unhandled(slots, last_slot, now, extra.settle_s, current)
    return PeriodicEntry(
        name=name,
        job=str(registration.get("job") or ""),
        cron=cron,
        tz=tz,
        queue=str(registration.get("queue") or ""),
        until_executed=registration.get("until_executed") is True,
        args=args,
        kwargs=kwargs,
        next_slot=upcoming,
        last_slot=last_slot,
        first_seen=_number(registration.get("first_seen")),
        running_jid=extra.running or None,
        problem=problem,
        paused=extra.paused,
        runs=tuple(([unhandled] if unhandled else []) + runs)[:RUNS_KEPT],
    )


def entries(
    client: redis.Redis, now: float | None = None, *, settle_s: float = DEFAULT_SETTLE_S
) -> list[PeriodicEntry]:
    """Every registered entry, by name, with its last runs (the recorded ones, and the slots due
    since the last one handled that nobody handled; `get` also reads the gaps between records, which
    costs a croniter step each). `now` defaults to Redis's clock, the
    one slots are taken on; `settle_s` is how late a slot nobody handled reads as missed (see
    `settle_s()`). Three round trips whatever the number of entries: the hash; the running locks,
    the paused set and the run histories; the enqueued jobs' statuses."""
    now = redis_time(client) if now is None else now
    stored = cast(dict[str, str], client.hgetall(keys.PERIODIC_ENTRIES))
    return _read(client, stored, now, settle_s, gaps=False)


def get(
    client: redis.Redis, name: str, now: float | None = None, *, settle_s: float = DEFAULT_SETTLE_S
) -> PeriodicEntry:
    raw = client.hget(keys.PERIODIC_ENTRIES, name)
    if raw is None:
        raise NotFound(f"no periodic entry {name!r} (see `cogworker periodic list`)")
    now = redis_time(client) if now is None else now
    return _read(client, {name: str(raw)}, now, settle_s, gaps=True)[0]


def _read(
    client: redis.Redis, stored: dict[str, str], now: float, settle_s: float, *, gaps: bool
) -> list[PeriodicEntry]:
    names = sorted(stored)
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.get(keys.periodic_running(name))
    pipe.smembers(keys.PERIODIC_PAUSED)
    for name in names:
        pipe.lrange(keys.periodic_runs(name), 0, RUNS_KEPT - 1)
    replies = pipe.execute()
    running, histories = replies[: len(names)], replies[-len(names) :]
    paused = cast(set[str], replies[len(names)])
    found = [
        _entry(name, stored[name], now, _Extra(holder, name in paused, tuple(history), settle_s, gaps))
        for name, holder, history in zip(names, running, histories, strict=True)
    ]
    ended = with_end_states(client, [list(e.runs) for e in found])
    return [replace(e, runs=_holding(e.running_jid, runs)) for e, runs in zip(found, ended, strict=True)]


def _holding(running_jid: str | None, runs: list[Run]) -> tuple[Run, ...]:
    """An until_executed run whose job status isn't tracked still says it hasn't ended: it holds
    the entry's running lock until it succeeds or dies."""
    return tuple(
        replace(run, state="not ended (holds the entry's lock)")
        if running_jid and run.jid == running_jid and run.state is None
        else run
        for run in runs
    )


def pause(client: redis.Redis, name: str) -> bool:
    """Pause an entry: from its next slot on, its slots are recorded as paused and nothing is
    enqueued. False when it was already paused."""
    if not client.hexists(keys.PERIODIC_ENTRIES, name):
        raise NotFound(f"no periodic entry {name!r} (see `cogworker periodic list`)")
    return bool(client.sadd(keys.PERIODIC_PAUSED, name))


def resume(client: redis.Redis, name: str) -> bool:
    """Resume a paused entry: its next slot runs as planned; the slots it was paused for stay
    handled (no catch-up). False when it wasn't paused. A name no longer registered can be
    resumed too, so a stale pause can always be cleared."""
    return bool(client.srem(keys.PERIODIC_PAUSED, name))


def enqueue_now(client: redis.Redis, settings: Settings, name: str) -> Enqueued:
    """Push the entry's job now, with its arguments, to its queue: the same push as `cogworker
    enqueue` (the job resolved when the app is importable here, else pushed by name with a
    warning). Outside the schedule: no slot is claimed and an until_executed entry's running lock
    is neither checked nor taken, so the next slot still runs as it would have."""
    entry = get(client, name)
    if entry.args is None or entry.kwargs is None:
        raise OpsError(
            f"periodic entry {name!r} was registered by an older worker, without its arguments: "
            "nothing pushed (the registration is rewritten when a worker of this version starts)"
        )
    if not entry.job or not entry.queue:
        raise OpsError(f"periodic entry {name!r} has no job or queue in its registration: nothing pushed")
    return enqueue(settings, client, entry.job, entry.args, entry.kwargs, queue=entry.queue)
