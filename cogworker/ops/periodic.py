"""Periodic entries as Redis knows them: their schedule, next and last slot, and "enqueue now".

Entries are declared in code (cogworker/api/periodic.py) and each worker's ticker writes their
registration to `cogworker:periodic:entries` (store/lua/periodic.lua), so what is listed here is what
the running fleet schedules, read without importing the app. The next slot is computed with the
same Entry methods the ticker uses, in the entry's time zone, from Redis's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.api.decorator import JobFunction
from cogworker.api.periodic import Entry
from cogworker.ops import NotFound, OpsError, redis_time
from cogworker.ops.enqueue import Enqueued, enqueue
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


def _not_callable(*args: Any, **kwargs: Any) -> None:
    """The job function of an entry rebuilt from Redis: only its schedule is used here."""
    raise RuntimeError("an entry read from Redis has no job function to call")


def next_slot(cron: str, tz: str, now: float) -> int:
    """The first slot after `now`, by the same rules as the ticker (api/periodic.py `Entry`)."""
    entry = Entry("", JobFunction(_not_callable, "", {}), cron, tz)
    return entry.next_after(entry.slot_at(now))


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


def _entry(name: str, raw: str, now: float, running: str | None) -> PeriodicEntry:
    registration = codec.loads_dict(raw) or {}
    cron, tz = str(registration.get("cron") or ""), str(registration.get("tz") or "UTC")
    args, kwargs = _arguments(registration)
    problem, upcoming = None, None
    if not registration:
        problem = "the registration is not a JSON object"
    else:
        try:
            upcoming = float(next_slot(cron, tz, now))
        # Redis's copy may come from another version's worker, or have been edited: a cron or a
        # zone this host can't read is shown as a problem, not a failed page.
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            problem = f"can't compute the next slot of {cron!r} in {tz!r}: {exc}"
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
        last_slot=_number(registration.get("last_slot")),
        first_seen=_number(registration.get("first_seen")),
        running_jid=running or None,
        problem=problem,
    )


def entries(client: redis.Redis, now: float | None = None) -> list[PeriodicEntry]:
    """Every registered entry, by name. `now` defaults to Redis's clock, the one slots are taken
    on. Two round trips whatever the number of entries: the hash, then the running locks."""
    now = redis_time(client) if now is None else now
    stored = cast(dict[str, str], client.hgetall(keys.PERIODIC_ENTRIES))
    names = sorted(stored)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.get(keys.periodic_running(name))
    running = pipe.execute() if names else []
    return [_entry(name, stored[name], now, holder) for name, holder in zip(names, running, strict=True)]


def get(client: redis.Redis, name: str, now: float | None = None) -> PeriodicEntry:
    raw = client.hget(keys.PERIODIC_ENTRIES, name)
    if raw is None:
        raise NotFound(f"no periodic entry {name!r} (see `cogworker periodic list`)")
    now = redis_time(client) if now is None else now
    return _entry(name, str(raw), now, cast(str | None, client.get(keys.periodic_running(name))))


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
