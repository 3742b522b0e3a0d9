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

**One enqueue per slot.** Every worker process's poller checks the entries (`Ticker.poll`, at most
every `periodic_check_interval_s`, and no more often than the poller polls: lower
`poll_interval_s` for sub-minute schedules). Time is read from Redis (`TIME`), so hosts with skewed
clocks agree on which slot is due. A due slot is claimed and its job pushed in one atomic script
(lua/periodic.lua): `SET cogworker:periodic:slot:<name>:<slot> NX`, then the push — whichever
process gets there first enqueues it, the others find it claimed. The push goes through the client
middleware chain like any other (a job's status is recorded, your middleware sees it).

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
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import redis
import structlog
from croniter import croniter

from cogworker import codec
from cogworker.api import client
from cogworker.api.decorator import JobFunction
from cogworker.api.middleware import run_client_chain
from cogworker.api.payload import check_arguments
from cogworker.names import QUEUE_NAME_RULE, is_queue_name
from cogworker.settings import Settings
from cogworker.store import key_guard, keys
from cogworker.store.connection import is_unavailable
from cogworker.store.scripts import Scripts
from cogworker.worker.recovery import PERIODIC_RUNNING_TTL_S

log = structlog.get_logger("cogworker.periodic")

# A slot's claim key lives for this long past the time its slot stops being the most recent one: it
# only has to outlive the races around its own slot (`last_slot` in the registration is the lasting
# record). A day for every slot of an every-second entry would be 86,400 keys.
CLAIM_MARGIN_S = 3600
SKIPPED_COUNT_CAP = 1000

F = TypeVar("F")


@dataclass(frozen=True, eq=False)
class Entry:
    name: str
    job: JobFunction
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
        return int(croniter(self.cron, base).get_prev(dt.datetime).timestamp())

    def next_after(self, slot: int) -> int:
        return int(croniter(self.cron, self._at(slot)).get_next(dt.datetime).timestamp())

    def slots_between(self, after: int, before: int, cap: int = SKIPPED_COUNT_CAP) -> list[int]:
        """The slots strictly between two slots, oldest first, at most `cap` of them."""
        it = croniter(self.cron, self._at(after))
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
        """What Redis shows about the entry (scalars only: see lua/periodic.lua)."""
        return {
            "job": self.job.name,
            "cron": self.cron,
            "tz": self.tz,
            "queue": str(self.options.get("queue") or self.job.queue),
            "until_executed": self.until_executed,
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
    """Run a job on a cron schedule: `@periodic("0 * * * *", tz="UTC")` above `@job(...)`."""
    if not isinstance(cron, str) or not croniter.is_valid(cron):
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


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str
    previous: int  # the last slot handled before this one, -1 if none
    holder: str


@dataclass(slots=True)
class _Seen:
    done: int  # the slot this process last saw handled
    next_due: int  # nothing to do for the entry before this


class Ticker:
    """Enqueues due periodic slots; `poll` is a poller task, `tick(now)` the step tests drive."""

    def __init__(
        self,
        client: redis.Redis,
        scripts: Scripts,
        settings: Settings,
        *,
        quiet: Callable[[], bool] = lambda: False,
        entries: Iterable[Entry] | None = None,
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._settings = settings
        self._quiet = quiet
        self._entries = list(entries) if entries is not None else None
        self._seen: dict[str, _Seen] = {}
        self._failing: set[str] = set()  # entries whose last check failed: logged once, not every poll
        self._next_check = 0.0

    @property
    def grace_s(self) -> float:
        # A slot is only ever noticed at the next poll: a grace shorter than that would call slots
        # missed that were merely waiting for a poll.
        s = self._settings
        return max(s.periodic_grace_s, 2 * max(s.poll_interval_s, s.periodic_check_interval_s))

    def poll(self) -> Any:
        """Poller task: check the entries if the check interval has passed and we aren't quiet.

        Returns "skipped" when it did nothing (the poller's convention: that proves nothing about
        Redis, so it doesn't end an outage report)."""
        now = time.monotonic()
        if now < self._next_check or self._quiet():
            return "skipped"
        current = self._entries if self._entries is not None else entries()
        if not current:
            return "skipped"
        self._next_check = now + self._settings.periodic_check_interval_s
        self.tick()
        return None

    def tick(self, now: float | None = None) -> None:
        """Handle every entry's due slot at `now` (default: Redis's clock)."""
        if now is None:
            seconds, micros = self._client.time()
            now = seconds + micros / 1e6
        for entry in self._entries if self._entries is not None else entries():
            try:
                self._check(entry, now)
            except Exception as exc:
                if is_unavailable(exc):
                    raise  # the poller reports the outage once; the next poll tries again
                if entry.name not in self._failing:
                    self._failing.add(entry.name)
                    log.error("periodic_check_failed", entry=entry.name, error=f"{type(exc).__name__}: {exc}")
            else:
                if entry.name in self._failing:
                    self._failing.discard(entry.name)
                    log.info("periodic_check_recovered", entry=entry.name)

    def _check(self, entry: Entry, now: float) -> None:
        seen = self._seen.get(entry.name)
        if seen is not None and now < seen.next_due:
            return
        slot = entry.slot_at(now)
        if seen is None:
            first = self._run(entry, "baseline", slot, now)
            if first.outcome == "baseline" or first.previous >= slot:
                self._seen[entry.name] = _Seen(slot, entry.next_after(slot))
                return
        elif slot <= seen.done:  # Redis's clock went back: wait for the next slot after the last
            seen.next_due = entry.next_after(seen.done)
            return
        self._handle(entry, slot, now)
        self._seen[entry.name] = _Seen(slot, entry.next_after(slot))

    def _handle(self, entry: Entry, slot: int, now: float) -> None:
        late_s = round(now - slot, 3)
        if late_s > self.grace_s:
            result = self._run(entry, "missed", slot, now)
            if result.outcome == "missed":
                log.warning(
                    "periodic_slot_missed",
                    entry=entry.name,
                    slot=entry.describe(slot),
                    late_s=late_s,
                    grace_s=self.grace_s,
                    note="no worker enqueued it in time (downtime, or Redis away); not run",
                )
                self._log_skipped(entry, result.previous, slot)
            return
        # Another process got there first: no need to build the job and run the chain for nothing.
        if self._client.exists(keys.periodic_slot(entry.name, slot)):
            return
        job = client.build_job(entry.job, entry.args, entry.kwargs, entry.options, None)
        job["periodic_name"] = entry.name
        job["periodic_slot"] = slot
        if entry.until_executed:
            job["periodic_until_executed"] = True
        results: list[Outcome] = []

        def push(final: dict[str, Any]) -> str | None:
            final.pop("at", None)
            final["enqueued_at"] = time.time()
            results.append(self._run(entry, "enqueue", slot, now, final))
            return str(final["jid"]) if results[-1].outcome == "enqueued" else None

        run_client_chain(job, push)
        if not results:
            # A client middleware stopped the push (a unique job whose previous copy is pending).
            # Recorded, so that one process says so and the others don't try in turn.
            if self._run(entry, "stopped", slot, now).outcome == "stopped":
                log.warning("periodic_push_stopped", entry=entry.name, slot=entry.describe(slot))
            return
        result = results[-1]
        if result.outcome == "enqueued":
            log.info(
                "periodic_enqueued",
                entry=entry.name,
                slot=entry.describe(slot),
                jid=job["jid"],
                late_s=late_s,
            )
        elif result.outcome == "running":
            log.warning(
                "periodic_slot_skipped",
                entry=entry.name,
                slot=entry.describe(slot),
                running_jid=result.holder,
                note="until_executed: the previous run is still queued or running",
            )
        if result.outcome in ("enqueued", "running"):
            self._log_skipped(entry, result.previous, slot)

    def _run(
        self, entry: Entry, mode: str, slot: int, now: float, job: dict[str, Any] | None = None
    ) -> Outcome:
        queue = str(job["queue"]) if job is not None else entry.registration()["queue"]
        claim_ttl_s = max(CLAIM_MARGIN_S, 2 * (entry.next_after(slot) - slot))
        reply = self._scripts.run(
            "periodic",
            [
                keys.periodic_slot(entry.name, slot),
                keys.PERIODIC_ENTRIES,
                keys.periodic_running(entry.name),
                keys.queue(queue),
                keys.QUEUES,
                keys.WAKE_CHANNEL,
            ],
            [
                entry.name,
                mode,
                slot,
                claim_ttl_s,
                codec.dumps(entry.registration()),
                repr(now),
                str(job["jid"]) if job is not None else "",
                codec.dumps(job) if job is not None else "",
                queue,
                "1" if entry.until_executed else "",
                PERIODIC_RUNNING_TTL_S,
            ],
            client=self._client,
        )
        result = Outcome(str(reply[0]), int(reply[1]), str(reply[2]))
        if result.outcome == "wrongtype":
            key_guard.request(self._client, result.holder)
            raise RuntimeError(
                f"{result.holder} has the wrong type for a periodic entry (the key guard moves it)"
            )
        return result

    def _log_skipped(self, entry: Entry, previous: int, slot: int) -> None:
        if previous < 0:
            return
        skipped = entry.slots_between(previous, slot)
        if skipped:
            log.warning(
                "periodic_slots_skipped",
                entry=entry.name,
                count=len(skipped) if len(skipped) < SKIPPED_COUNT_CAP else f"{SKIPPED_COUNT_CAP}+",
                first=entry.describe(skipped[0]),
                last=entry.describe(entry.slot_at(slot - 1)),
                note="missed while no worker ran them (downtime, or Redis away): only the most recent "
                "slot is caught up",
            )


__all__ = ["Entry", "Outcome", "Ticker", "entries", "periodic", "register", "unregister"]
