"""The poller thread: due scheduled and retry entries onto their queues, orphan recovery, the key
guard, retries of deferred settles and lock releases, and batch holds whose lease lapsed.

A failed poll is reported (once per outage) and tried again next interval: the thread never dies.
The interval is randomised so that N processes don't poll in lockstep. A wrong-type key met by any
component (here, by this process's fetcher, or by any client through `key_guard.request`) runs the
key guard at once rather than at its next `key_guard_interval_s` pass.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis
import structlog

from cogworker.store import key_guard, keys, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.loops.due_entries import DueEntries
from cogworker.worker.loops.graduation import DUE_GAP_S, PEEK_EVERY_S, SetPlace
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.settling import shard_route
from cogworker.worker.settling.filing import Unanswered
from cogworker.worker.settling.partition_unsettled import file_every_partition
from cogworker.worker.settling.settle import file_unsettled

if TYPE_CHECKING:
    from cogworker.worker.loops.outbox_sweep import OutboxSweep
    from cogworker.worker.loops.partition_poller import PartitionPoller
    from cogworker.worker.recovering.partitions import Health

log = structlog.get_logger("cogworker.poller")

# However often the guard is asked for, it runs at most this often (a key it can't move aside, an
# ACL refusing RENAME, must not turn the poller into a busy loop).
KEY_GUARD_MIN_GAP_S = 1.0


class Poller:
    def __init__(
        self,
        ctx: RedisContext,
        recovery: Recovery,
        *,
        quiet: Callable[[], bool],
        scan_at_boot: bool,
        extra_tasks: list[Callable[[], object]] | None = None,
        shard_clients: ShardClients | None = None,
        shard_health: Health | None = None,
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._recovery = recovery
        self._locks = ctx.locks
        self._unanswered: Unanswered = []  # filing.file_unsettled's, kept between polls
        self._quiet = quiet
        self._scan_pending = scan_at_boot
        self._next_orphan_check = 0.0
        self._next_key_check = 0.0
        self._last_key_check = -KEY_GUARD_MIN_GAP_S
        self._keys_asked = False
        self._nudge = threading.Event()
        self._extra_tasks = extra_tasks or []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        # The sharded layout: schedule and retry sets per queue partition (partition_poller.py).
        self._partitions: PartitionPoller | None = None
        self._outbox: OutboxSweep | None = None
        if shards.is_sharded():
            from cogworker.worker.loops.partition_poller import PartitionPoller

            if shard_clients is None:
                sharded = recovery.sharded
                shard_clients = (
                    sharded.clients if sharded is not None else ShardClients(ctx.settings, home=ctx.client)
                )
            self._partitions = PartitionPoller(self, ctx, shard_clients, self._rng, shard_health)
            # Steps that span slots, left by a mover that died (store/outbox.py).
            from cogworker.store.outbox import Mover
            from cogworker.worker.loops.outbox_sweep import OutboxSweep

            mover = Mover(shard_clients, ctx.settings)
            self._outbox = OutboxSweep(mover, self._partitions.known, ctx.outages, shard_health)
        self._ctx = ctx
        self.due_entries = DueEntries(ctx, self._guard_now)

    def start(self) -> None:
        key_guard.set_local_poller(self.check_keys_soon)
        self._thread = threading.Thread(target=self._loop, name="poller", daemon=True)
        self._thread.start()

    def check_keys_soon(self) -> None:
        """Something in this process met a wrong-type key: run the key guard now, not in minutes."""
        self._keys_asked = True
        self._nudge.set()

    def stop(self) -> None:
        key_guard.set_local_poller(None)
        self._stop.set()
        self._nudge.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            self.poll_once()
            interval = self._settings.poll_interval_s * (0.5 + self._rng.random())
            if self._wait_enqueuing_due(interval):
                return

    def _wait_enqueuing_due(self, seconds: float) -> bool:
        """Wait until the next poll, enqueuing on time the entries that fall due before it; True
        once stopped. Only the scheduler runs early: the other steps keep the poll's pace."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            early = self._early_pass_in(left)
            if early is None:
                if self._wait(min(left, PEEK_EVERY_S)):
                    return True
                continue
            if self._wait(early):
                return True
            if not self._quiet():
                self._guarded("Scheduler", self._enqueue_early)
        return self._stop.is_set()

    def _enqueue_early(self) -> int:
        """The early pass: in the sharded layout only the partitions the look found due soon."""
        if self._partitions is not None:
            return self._partitions.enqueue_due(early=True)
        return self.enqueue_due()

    def _early_pass_in(self, left_s: float) -> float | None:
        """Seconds until an early pass of the scheduler, when the first entry of the schedule or
        retry set falls due within `left_s` (and PEEK_EVERY_S); else None. One round trip (a ZRANGE
        of each set's first entry, whatever the sets' size). A failure waits for the next poll, which
        reports it."""
        if left_s <= DUE_GAP_S or self._quiet():
            return None
        if self._partitions is not None:
            return self._partitions.early_pass_in(left_s)
        try:
            pipe = self._client.pipeline(transaction=False)
            for set_key in (keys.SCHEDULE, keys.RETRY):
                pipe.zrange(set_key, 0, 0, withscores=True)
            firsts = pipe.execute()
        except Exception:
            return None
        scores = [float(entries[0][1]) for entries in firsts if entries]
        if not scores:
            return None
        wait_s = max(DUE_GAP_S, min(scores) - time.time()) + DUE_GAP_S * self._rng.random()
        return wait_s if wait_s < min(left_s, PEEK_EVERY_S) else None

    def _wait(self, seconds: float) -> bool:
        """Wait until the next poll, running the key guard early when asked; True once stopped."""
        end = time.monotonic() + seconds
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self._nudge.wait(left):
                self._nudge.clear()
                if not self._stop.is_set():
                    self._guarded("Key guard", self._check_keys_if_due)
        return True

    def poll_once(self) -> None:
        self._guarded("Key guard", self._check_keys_if_due)
        self._guarded("Orphan recovery", self._recover_if_due)
        if not self._quiet():
            self._guarded("Scheduler", self.enqueue_due)
        self._guarded("Lock release", self._locks.retry_deferred)
        self._guarded("Batch holds", self._lapse_batch_holds)
        if self._outbox is not None:
            self._guarded("Outbox", self._outbox.sweep)
        for task in self._extra_tasks:
            self._guarded(getattr(task, "__qualname__", "task"), task)

    def _guarded(self, component: str, step: Callable[[], object]) -> None:
        try:
            result = step()
        except Exception as exc:
            self._outages.report(component, exc)
            if key_guard.is_wrong_type(exc):
                # A registry or set this step reads (cogworker:inprogress-identities, :unsettled,
                # ...) has the wrong type: every poll would fail the same way until the guard's pass.
                self.check_keys_soon()
            return
        if result != "skipped":
            self._outages.recovered(component)

    def _check_keys_if_due(self) -> object:
        now = time.monotonic()
        if now < self._last_key_check + KEY_GUARD_MIN_GAP_S:
            return "skipped"
        try:
            requested = key_guard.take_requests(self._client)
        except redis.ResponseError as exc:
            if not key_guard.is_wrong_type(exc):
                raise
            requested, self._keys_asked = [], True  # the request set itself: the full check moves it
        if now < self._next_key_check and not (self._keys_asked or requested):
            return None  # not "skipped": Redis answered, which ends an outage
        self._keys_asked = False
        self._last_key_check = now
        key_guard.check(self._client, self._settings, self._settings.queue_spec.names, requested)
        self._next_key_check = now + self._settings.key_guard_interval_s
        return None

    def _guard_now(self, found: list[str]) -> None:
        """Keys of the wrong type met by this poller: moved aside at once; the entries they stopped
        stay where they are, for the next poll. A partition's key (sharded layout) is in another slot
        than this process's client's: it is asked of the key guard instead (key_guard.request)."""
        if self._partitions is not None:
            log.error(
                "wrong_type_key_met", keys=found, note="nothing moved; the key guard is asked to move it"
            )
            key_guard.request(self._client, *found)
            return
        log.error("wrong_type_key_met", keys=found, note="nothing moved; the key guard moves it aside now")
        self._last_key_check = time.monotonic()
        key_guard.check(self._client, self._settings, self._settings.queue_spec.names, found)
        self._next_key_check = self._last_key_check + self._settings.key_guard_interval_s

    def _recover_if_due(self) -> object:
        now = time.monotonic()
        if now < self._next_orphan_check:
            return "skipped"
        # Scheduled before the work: a check that keeps failing must not run on every poll; but a
        # failure (Redis away) brings the next try forward to the next poll, since Redis coming back
        # is when recovery matters most.
        self._next_orphan_check = now + self._settings.poll_interval_s
        self._recovery.recover_orphans(scan=self._scan_pending)
        self._scan_pending = False
        route = shard_route.current()
        if route is None:
            file_unsettled(self._client, self._scripts, self._settings, self._locks, self._unanswered)
        else:
            file_every_partition(route, (self._scripts, self._settings, self._locks), self._unanswered)
        self._next_orphan_check = now + self._settings.orphan_check_interval_s
        return None

    def _lapse_batch_holds(self) -> object:
        """Release the batch holds whose lease lapsed: their block's process died, or lost Redis for
        longer than the lease (api/batch_holds.py). One ZRANGEBYSCORE when none did."""
        from cogworker.api import batch_holds  # loaded on the first poll, not at start-up

        return batch_holds.lapse_due(self._client, self._settings.batch_ttl_s)

    def enqueue_due(self) -> int:
        """Move every due entry of the schedule and retry sets to its queue; returns how many. In the
        sharded layout, every partition's sets, each into its own partition's queue."""
        if self._partitions is not None:
            return self._partitions.enqueue_due()
        now = time.time()
        return sum(
            self.enqueue_due_in(SetPlace.one_slot(self._ctx, key), now) for key in (keys.SCHEDULE, keys.RETRY)
        )

    def enqueue_due_in(self, place: SetPlace, now: float) -> int:
        """Every entry of one set due at `now` onto its queue (due_entries.py)."""
        return self.due_entries.enqueue_due_in(place, now)
