"""The poller thread: due scheduled and retry entries onto their queues, orphan recovery, the key
guard, and retries of deferred settles and lock releases.

A failed poll is reported (once per outage) and tried again next interval: the thread never dies.
The interval is randomised so that N processes don't poll in lockstep.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import structlog

from cogworker import codec, key_guard, keys, retry
from cogworker.context import RedisContext
from cogworker.recovery import Recovery
from cogworker.settle import file_unsettled

log = structlog.get_logger("cogworker.poller")

BATCH = 100
SETS = (keys.SCHEDULE, keys.RETRY)


class Poller:
    def __init__(
        self,
        ctx: RedisContext,
        recovery: Recovery,
        *,
        quiet: Callable[[], bool],
        scan_at_boot: bool,
        extra_tasks: list[Callable[[], object]] | None = None,
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._recovery = recovery
        self._locks = ctx.locks
        self._quiet = quiet
        self._scan_pending = scan_at_boot
        self._next_orphan_check = 0.0
        self._next_key_check = 0.0
        self._extra_tasks = extra_tasks or []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="poller", daemon=True)
        self._thread.start()

    def check_keys_soon(self) -> None:
        """A fetch met a wrong-type key: run the key guard on the next poll, not in minutes."""
        self._next_key_check = 0.0

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            self.poll_once()
            interval = self._settings.poll_interval_s * (0.5 + self._rng.random())
            if self._stop.wait(interval):
                return

    def poll_once(self) -> None:
        self._guarded("Key guard", self._check_keys_if_due)
        self._guarded("Orphan recovery", self._recover_if_due)
        if not self._quiet():
            self._guarded("Scheduler", self.enqueue_due)
        self._guarded("Lock release", self._locks.retry_deferred)
        for task in self._extra_tasks:
            self._guarded(getattr(task, "__qualname__", "task"), task)

    def _guarded(self, component: str, step: Callable[[], object]) -> None:
        try:
            result = step()
        except Exception as exc:
            self._outages.report(component, exc)
            return
        if result != "skipped":
            self._outages.recovered(component)

    def _check_keys_if_due(self) -> object:
        now = time.monotonic()
        if now < self._next_key_check:
            return "skipped"
        key_guard.check(self._client, self._settings, self._settings.queue_spec.names)
        self._next_key_check = now + self._settings.key_guard_interval_s
        return None

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
        file_unsettled(self._client, self._scripts, self._settings, self._locks)
        self._next_orphan_check = now + self._settings.orphan_check_interval_s
        return None

    def enqueue_due(self) -> int:
        """Move every due entry of the schedule and retry sets to its queue; returns how many."""
        moved = 0
        now = time.time()
        for set_key in SETS:
            while True:
                due = self._client.zrangebyscore(set_key, "-inf", now, start=0, num=BATCH)
                if not due:
                    break
                moved += self._graduate(set_key, [str(raw) for raw in due])
                if len(due) < BATCH:
                    break
        return moved

    def _graduate(self, set_key: str, entries: list[str]) -> int:
        pipe = self._client.pipeline(transaction=False)
        invalid: list[str] = []
        now = time.time()
        for raw in entries:
            job = codec.loads_dict(raw)
            queue = job.get("queue") if job is not None else None
            if job is None or not isinstance(queue, str) or not queue:
                invalid.append(raw)
                continue
            job.pop("at", None)
            job["enqueued_at"] = now
            self._scripts.run(
                "graduate",
                [set_key, keys.queue(queue), keys.QUEUES, keys.WAKE_CHANNEL],
                [raw, codec.dumps(job), queue],
                client=pipe,
            )
        moved = sum(int(r) for r in pipe.execute()) if len(pipe) else 0
        for raw in invalid:
            self._bury(set_key, raw)
        return moved

    def _bury(self, set_key: str, raw: str) -> None:
        filing = retry.unreadable(raw, None, f"not a job (a JSON object with a queue) in {set_key}")
        buried = self._scripts.run(
            "bury",
            [set_key, keys.DEAD, keys.STAT_FAILED],
            [raw, filing.score, codec.dumps(filing.payload)],
            client=self._client,
        )
        if buried:
            log.error("unreadable_entry_to_dead", source=set_key, entry=raw[:200])
