"""Periodic jobs: a cron schedule on a job, enqueued exactly once per slot across every process.

    @periodic("0 * * * *", tz="Europe/Paris")       # stacked on @job, above it
    @job(queue="maintenance")
    def hourly_rollup() -> None: ...

Cron expressions are croniter's: five fields, or six with seconds as the *last* field
(`"* * * * * *"` is every second). Slots are computed in the entry's time zone (zoneinfo), so
"0 9 * * *" in "America/New_York" stays at 9 a.m. local time across daylight-saving changes. Options:
`tz` (default UTC), `name` (the entry's name; default the job's — give two entries of one job
different names), `args`/`kwargs` for the job, `queue`, and `until_executed`.

Entries are registered in code, by the decorator, in this module's registry: a worker knows the
entries of the modules it imports (COGWORKER_REQUIRE).

**One enqueue per slot.** Every worker process's poller checks the entries (`Ticker.poll` in
cogworker/worker/loops/ticker.py, at most every `periodic_check_interval_s`, and no more often than the
poller polls: lower `poll_interval_s` for sub-minute schedules). Time is read from Redis (`TIME`),
so hosts with skewed clocks agree on which slot is due. A due slot is claimed and its job pushed in
one atomic script (store/lua/periodic.lua): `SET cogworker:periodic:slot:<name>:<slot> NX`, then
the push — whichever process gets there first enqueues it, the others find it claimed. The push
goes through the client middleware chain like any other (a job's status is recorded, your
middleware sees it). In the sharded layout (COGWORKER_CLUSTER_SHARDING=queues) the job's queue
partition is another slot: the script writes the push as an outbox entry instead, moved at once by
the ticker, or by any worker's sweep if it died (api/periodic_outbox.py); still once per slot.

**until_executed=True**: a slot doesn't start while the entry's previous run is still queued or
running. The script takes the entry's running lock (`cogworker:periodic:running:<name>`, holding the
run's jid, with a TTL of a day) with the push; a slot that comes due while it is held is skipped and
logged. The lock is released when the run ends — success, or a failure that sends it to dead — by
the same owner-checked release as unique claims (unique.py), also when it is filed in dead outside
the middleware chain. It is kept while the run waits for a retry. The payload carries
`periodic_name` and `periodic_until_executed: true`, so orphan recovery retakes the lock for a run it
requeues. Every payload also carries `periodic_slot` (the slot's epoch seconds).

**Slots missed during downtime** (no worker running, or Redis unreachable). Policy: only the most
recent slot is ever caught up, once, and only if it is at most `periodic_grace_s` late (default one
hour); a most recent slot later than that is recorded as missed (its claim key says "missed") and
not run; slots before it are skipped. Whatever was skipped is logged once, by the process that
handles the next slot, with how many slots were skipped and the first and last of them
(`periodic_slots_skipped`), and a missed most recent slot as `periodic_slot_missed`. Catching up a
backlog of runs after an outage would mostly do the same work several times at once; this runs the
job once as soon as the fleet is back, as long as that is still close to when it was due.
An entry seen for the first time records the current slot as handled without running it: a new
hourly entry deployed at 14:20 first runs at 15:00, not at once for 14:00.

**Run history and pause.** The same script records each slot it decides in the entry's history
(`cogworker:periodic:runs:<name>`, the last RUNS_KEPT: enqueued with the jid, running, stopped,
missed or paused), read by `cogworker periodic list` and the Web UI (ops/periodic_runs.py). An entry
named in `cogworker:periodic:paused` (`cogworker periodic pause NAME`) has each slot claimed as
"paused" and nothing pushed; the script reads the set with the claim. A paused slot counts as
handled, so `resume` runs the next slot and catches none of the paused ones up.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cogworker import codec
from cogworker.api.decorator import JobFunction
from cogworker.api.payload import check_arguments
from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name

SKIPPED_COUNT_CAP = 1000
# Slots an entry's run history keeps (`cogworker:periodic:runs:<name>`): the Web UI's "last runs".
RUNS_KEPT = 10


def _croniter() -> Any:
    """croniter's class, imported on first use: croniter (with dateutil) costs ~30 ms to import and
    runs `file` on the interpreter while it does, which every worker would pay before its first job."""
    from croniter import croniter

    return croniter


F = TypeVar("F")


@dataclass(frozen=True, eq=False)
class Entry:
    name: str
    job: JobFunction[..., Any]
    cron: str
    tz: str = "UTC"
    until_executed: bool = False
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def _at(self, epoch: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(epoch, self.zone)

    def slot_at(self, now: float) -> int:
        """The most recent slot at or before `now` (epoch seconds). Slots fall on whole seconds."""
        base = self._at(int(now) + 1)
        return int(_croniter()(self.cron, base).get_prev(dt.datetime).timestamp())

    def next_after(self, slot: int) -> int:
        return int(_croniter()(self.cron, self._at(slot)).get_next(dt.datetime).timestamp())

    def slots_between(self, after: int, before: int, cap: int = SKIPPED_COUNT_CAP) -> list[int]:
        """The slots strictly between two slots, oldest first, at most `cap` of them."""
        it = _croniter()(self.cron, self._at(after))
        found: list[int] = []
        while len(found) < cap:
            slot = int(it.get_next(dt.datetime).timestamp())
            if slot >= before:
                break
            found.append(slot)
        return found

    def describe(self, slot: int) -> str:
        return self._at(slot).isoformat()

    @property
    def options(self) -> dict[str, Any]:
        return {**self.job.options, **({"queue": self.queue} if self.queue else {})}

    def registration(self) -> dict[str, Any]:
        """What Redis shows about the entry (scalars only: see store/lua/periodic.lua). The job's
        arguments go as one JSON string, so "Enqueue now" (ops/periodic.py) can push the same job
        from a process that doesn't import the entry's module, and the script's cjson, which would
        turn an empty list into an object and round large integers, never decodes them."""
        return {
            "job": self.job.name,
            "cron": self.cron,
            "tz": self.tz,
            "queue": str(self.options.get("queue") or self.job.queue),
            "until_executed": self.until_executed,
            "arguments": codec.dumps({"args": list(self.args), "kwargs": self.kwargs}),
        }


_registry: dict[str, Entry] = {}


def periodic(
    cron: str,
    *,
    tz: str = "UTC",
    until_executed: bool = False,
    name: str | None = None,
    args: Iterable[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
) -> Callable[[F], F]:
    """Run a job on a cron schedule, enqueued exactly once per slot across every process.

    Goes above `@job`. Every worker's poller checks the entries of the modules it imports
    (COGWORKER_REQUIRE); whichever process claims a due slot first pushes the job. After downtime
    only the most recent missed slot runs, and only if it is at most COGWORKER_PERIODIC_GRACE_S late.

    Args:
        cron: A cron expression: five fields, or six with seconds as the last field.
        tz: The time zone the slots are computed in (zoneinfo name), so "0 9 * * *" stays at 9 a.m.
            local time across daylight-saving changes.
        until_executed: Skip a slot while the entry's previous run is still queued or running.
        name: The entry's name. Default: the job's name; give two entries of one job different names.
        args: The job's positional arguments.
        kwargs: The job's keyword arguments.
        queue: The queue to push to. Default: the job's.

    Returns:
        A decorator that registers the entry and returns the job unchanged.

    Raises:
        ValueError: `cron` is not a cron expression or `tz` not a time zone, or another entry with
            this name has another job or schedule.
        TypeError: An argument is not JSON-native, `queue` is not a queue name, or the decorated
            object is not a job (put `@periodic` above `@job`).

    Example:
        ```python
        @cogworker.periodic("0 * * * *", tz="Europe/Paris")
        @cogworker.job(queue="maintenance")
        def hourly_rollup() -> None: ...
        ```
    """
    if not isinstance(cron, str) or not _croniter().is_valid(cron):
        raise ValueError(f"{cron!r} is not a cron expression (5 fields, or 6 with seconds last)")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(f"{tz!r} is not a time zone name (e.g. 'UTC', 'Europe/Paris')") from exc
    arg_tuple, kwarg_dict = tuple(args), dict(kwargs or {})
    check_arguments(arg_tuple, kwarg_dict)
    if queue is not None and not is_queue_name(queue):
        raise TypeError(f"queue must be {QUEUE_NAME_RULE}, not {queue!r}")

    def wrap(fn: F) -> F:
        if not isinstance(fn, JobFunction):
            raise TypeError("@periodic goes above @job: it schedules a job, not a plain function")
        register(Entry(name or fn.name, fn, cron, tz, until_executed, arg_tuple, kwarg_dict, queue))
        return fn

    return wrap


def register(entry: Entry) -> None:
    """Add an entry. Registering a name again replaces it only with the same job and schedule (a
    module imported twice); two different entries under one name are a mistake worth an error."""
    known = _registry.get(entry.name)
    if known is not None and (known.job.name, known.cron, known.tz) != (entry.job.name, entry.cron, entry.tz):
        raise ValueError(
            f"periodic entry {entry.name!r} is already registered for {known.job.name} at {known.cron!r};"
            " give the second one its own name="
        )
    _registry[entry.name] = entry


def unregister(name: str) -> None:
    _registry.pop(name, None)


def entries() -> list[Entry]:
    return list(_registry.values())
