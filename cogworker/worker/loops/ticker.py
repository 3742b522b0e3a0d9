"""The worker's side of periodic jobs: each poll, enqueue the entries' due slots, once per slot
across every process (the rules are in cogworker/api/periodic.py, where entries are declared)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from cogworker import codec
from cogworker.api import client, features
from cogworker.api.middleware import run_client_chain
from cogworker.api.periodic import RUNS_KEPT, SKIPPED_COUNT_CAP, Entry, entries
from cogworker.store import key_guard, keys, shards
from cogworker.store.connection import is_unavailable
from cogworker.store.redis_context import RedisContext
from cogworker.worker.recovering.recovery import PERIODIC_RUNNING_TTL_S

if TYPE_CHECKING:
    from cogworker.api.periodic_outbox import SlotPusher
    from cogworker.store.shard_clients import SlotClients

log = structlog.get_logger("cogworker.periodic")

# A slot's claim key lives for this long past the time its slot stops being the most recent one: it
# only has to outlive the races around its own slot (`last_slot` in the registration is the lasting
# record). A day for every slot of an every-second entry would be 86,400 keys.
CLAIM_MARGIN_S = 3600


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str
    previous: int  # the last slot handled before this one, -1 if none
    holder: str
    entry_id: str = ""  # the sharded layout's "enqueued": the outbox entry pushing the job


@dataclass(slots=True)
class _Seen:
    done: int  # the slot this process last saw handled
    next_due: int  # nothing to do for the entry before this


class Ticker:
    """Enqueues due periodic slots; `poll` is a poller task, `tick(now)` the step tests drive."""

    def __init__(
        self,
        ctx: RedisContext,
        *,
        quiet: Callable[[], bool] = lambda: False,
        entries: Iterable[Entry] | None = None,
        clients: SlotClients | None = None,
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._quiet = quiet
        self._entries = list(entries) if entries is not None else None
        self._seen: dict[str, _Seen] = {}
        self._failing: set[str] = set()  # entries whose last check failed: logged once, not every poll
        self._next_check = 0.0
        # The sharded layout: the slot's job goes through the home outbox (api/periodic_outbox.py).
        self._pusher: SlotPusher | None = None
        if shards.is_sharded():
            from cogworker.api.periodic_outbox import SlotPusher

            self._pusher = SlotPusher(ctx.client, ctx.settings, clients)

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
        if self._pusher is not None and self._pusher.left:
            self._pusher.retry_left()
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
            if result.outcome == "paused":
                self._log_paused(entry, slot)
            elif result.outcome == "missed":
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
        # A paused entry is recorded without building the job either (the script reads the paused
        # set again with the claim, so a resume in between pushes the job after all).
        pipe = self._client.pipeline(transaction=False)
        pipe.exists(keys.periodic_slot(entry.name, slot))
        pipe.sismember(keys.PERIODIC_PAUSED, entry.name)
        claimed, paused = pipe.execute()
        if claimed:
            return
        if paused:
            outcome = self._run(entry, "paused", slot, now).outcome
            if outcome == "paused":
                self._log_paused(entry, slot)
            if outcome != "resumed":
                return
        options = entry.options
        queue = str(options.get("queue") or entry.job.queue)
        job = client.build_job(
            entry.job.name, entry.args, entry.kwargs, queue=queue, options=options, at=None
        )
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

        features.ensure_installed()
        run_client_chain(job, push)
        if not results:
            # A client middleware stopped the push (a unique job whose previous copy is pending).
            # Recorded, so that one process says so and the others don't try in turn.
            if self._run(entry, "stopped", slot, now).outcome == "stopped":
                log.warning("periodic_push_stopped", entry=entry.name, slot=entry.describe(slot))
            return
        result = results[-1]
        if result.outcome == "paused":
            self._log_paused(entry, slot)
        elif result.outcome == "enqueued":
            if self._pusher is not None:
                self._pusher.move(result.entry_id)
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
        sharded: list[str] = []
        pusher = self._pusher
        if pusher is not None:  # the job's partition is out of the home slot's reach
            from cogworker.api.periodic_outbox import script_args

            sharded = script_args(entry.name, slot, job)
            if job is not None:  # until its reply says otherwise, it may have written the entry
                pusher.left.add(sharded[1])
        reply = self._scripts.run(
            "periodic",
            [
                keys.periodic_slot(entry.name, slot),
                keys.PERIODIC_ENTRIES,
                keys.periodic_running(entry.name),
                keys.OUTBOX if sharded else keys.queue(queue),
                keys.QUEUES,
                keys.WAKE_CHANNEL,
                keys.periodic_runs(entry.name),
                keys.PERIODIC_PAUSED,
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
                RUNS_KEPT,
                *sharded,
            ],
            client=self._client,
        )
        result = Outcome(str(reply[0]), int(reply[1]), str(reply[2]), str(reply[3]) if len(reply) > 3 else "")
        if pusher is not None and job is not None and result.outcome not in ("enqueued", "taken"):
            pusher.left.discard(sharded[1])  # no entry for the slot ("taken": maybe an earlier call's)
        if result.outcome == "wrongtype":
            key_guard.request(self._client, result.holder)
            raise RuntimeError(
                f"{result.holder} has the wrong type for a periodic entry (the key guard moves it)"
            )
        return result

    def _log_paused(self, entry: Entry, slot: int) -> None:
        log.info("periodic_slot_paused", entry=entry.name, slot=entry.describe(slot))

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
