"""Squaring a live process's in-progress list with the jobs it holds (reliable fetch).

A fetch script or BLMOVE whose reply is lost (Redis stalled past COGWORKER_REDIS_TIMEOUT_S and ran
the command after the client gave up) leaves jobs on this process's list that it never learns of.
Orphan recovery only takes dead processes' lists, so on a live process they would wait until it
stopped. The same goes for a give-back that failed, and for a job whose thread failed outside the
processor. So every failure of that kind schedules a reconcile: one script (reconcile.lua) puts back
on its queue every entry the process doesn't hold.

What the process holds is this ledger (jobs fetched and not yet finished or given back: queued for a
thread, running, on their way back) plus what its settler still has to settle (acknowledgements not
yet sent, filings not yet made). A job leaves the ledger only after the settler has it, and the
ledger is read first, so a reconcile may count a job twice (it then keeps it) but never misses one.

A command sent before a failure can still run after Redis answered the reconcile (it sat in a socket
Redis read later), so a reconcile after a failure is followed by one more, RECONCILE_CONFIRM_S later.
Between failures one runs every COGWORKER_ORPHAN_CHECK_INTERVAL_S, a backstop for any path missed.
Only the fetcher thread runs it, between fetches and never during a blocking wait: a job moved by a
fetch in flight would look unheld.

A reconcile after a failure, or after any outage this process had (its heartbeat's, say, while every
thread was busy and nothing was fetched), also looks the other way: jobs held here that are no
longer on the list were requeued by orphan recovery while this process was silent past
COGWORKER_ORPHAN_THRESHOLD_S (a partition: it was declared dead), or lost with Redis's data. They
are not ours any more; the settler disowns them (worker/settling/settle.py). An outage makes a
reconcile due at once, so this runs before the next fetch: no copy fetched again here can be
mistaken for the one we hold.

In the sharded layout (store/shards.py) the process has one list per queue partition: the launcher
gives the reconciler `partition_lists` (partition_lists.py), which reconciles each partition's list in
its own slot, and the look the other way reads every partition's list.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from cogworker import codec
from cogworker.store.redis_context import RedisContext
from cogworker.worker.fetching.fetch import Fetcher, Reconciled, Work
from cogworker.worker.settling.settle import Settler

if TYPE_CHECKING:
    from cogworker.worker.recovering.partition_lists import PartitionLists

log = structlog.get_logger("cogworker.reconcile")

RECONCILE_CONFIRM_S = 2.0
# A reconcile that failed, or left a job behind a wrong-type key, is tried again this soon.
FAILED_RETRY_S = 1.0
KEPT_RETRY_S = 5.0


class Reconciler:
    def __init__(
        self,
        ctx: RedisContext,
        settler: Settler,
        on_wrong_type: Callable[[], None] | None = None,
    ) -> None:
        self._settings = ctx.settings
        self._client = ctx.client
        self._outages = ctx.outages
        self._settler = settler
        self._on_wrong_type = on_wrong_type
        self.on_buried: Callable[[list[str]], None] | None = None
        # The sharded layout's lists, one per partition (set by the launcher); None: the fetcher's one.
        self.partition_lists: PartitionLists | None = None
        # A leaf lock: nothing is called while it is held.
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._run_ids: dict[str, str] = {}  # held payload -> run_id of the Redis it was fetched from
        self._thread_failed: Counter[str] = Counter()
        self._failures = 0  # failures that may have left an unknown entry on the list
        self._answered = 0  # ... of which the last successful reconcile ran after this many
        self._due = time.monotonic() + self._settings.orphan_check_interval_s
        self._outages_seen = self._outages.started

    # The ledger -----------------------------------------------------------------------------
    def hold(self, works: Iterable[Work]) -> None:
        """Fetched jobs this process now holds (call before anything can run or give them back)."""
        with self._lock:
            for work in works:
                self._held[work.raw] += 1
                self._run_ids[work.raw] = work.run_id

    def release(self, raw: str) -> None:
        """A job no longer held here: finished (the settler has it), filed, or given back."""
        with self._lock:
            self._release(raw)

    def _release(self, raw: str) -> None:
        self._held[raw] -= 1
        if self._held[raw] <= 0:
            del self._held[raw]
            self._run_ids.pop(raw, None)

    def lost_reply(self) -> None:
        """A command that may have moved jobs onto our list failed: what it did is unknown."""
        with self._lock:
            self._failures += 1
            self._due = 0.0

    def thread_failed(self, raw: str) -> None:
        """A job thread failed outside the processor: the job goes back counting an orphaning (unless
        the settler holds it), so one that keeps failing its thread ends in dead."""
        with self._lock:
            self._release(raw)
            self._thread_failed[raw] += 1
            self._failures += 1
            self._due = 0.0

    @property
    def unanswered(self) -> bool:
        """A failure came after the last successful reconcile began."""
        with self._lock:
            return self._failures != self._answered

    @property
    def due(self) -> bool:
        return time.monotonic() >= self._due

    # The reconcile --------------------------------------------------------------------------
    def run_if_due(self, fetcher: Fetcher) -> None:
        """On the fetcher thread, between fetches. A failure is retried soon; it never blocks."""
        outages = self._outages.started
        if not self.due and outages == self._outages_seen:
            return
        with self._lock:
            held = Counter(self._held)
            failed = Counter(self._thread_failed)
            failures = self._failures
            after_failure = failures != self._answered or outages != self._outages_seen
        held.update(self._settler.holding())
        lists = self.partition_lists
        try:
            if lists is not None:
                result = lists.reconcile(held.elements(), failed.elements(), self._settings.max_orphanings)
                if after_failure:
                    self._disown_requeued(lists.contents(), lists.run_ids())
            else:
                result = fetcher.reconcile(held.elements(), failed.elements(), self._settings.max_orphanings)
                if after_failure and fetcher.keeps_in_progress:
                    raws = self._client.lrange(fetcher.in_progress_key, 0, -1)
                    on_list = Counter(str(raw) for raw in raws)
                    self._disown_requeued(on_list, {fetcher.run_id} if fetcher.run_id else set())
        except Exception as exc:
            self._outages.report("Reconcile", exc)
            with self._lock:
                self._due = min(self._due, time.monotonic() + FAILED_RETRY_S)
            return
        self._outages.recovered("Reconcile")
        self._outages_seen = outages
        self._schedule_next(result, failures, failed)
        self._report(result, buried_told=lists is not None)
        if self._settler.disowned:
            self._settler.prune_disowned(self.holding())

    def holding(self) -> Counter[str]:
        """Every payload this process holds or still has to settle, once per copy (a copy may be
        counted twice: held, and with its ack queued)."""
        with self._lock:
            held = Counter(self._held)
        held.update(self._settler.holding())
        return held

    def _disown_requeued(self, on_list: Counter[str], run_ids: set[str]) -> None:
        """Held jobs missing from our list(s) (`on_list`, read after the reconcile) were requeued while
        we were declared dead: disowned. Not those fetched from a Redis that is none of these
        (`run_ids`: the server's, or every partition master's): it lost their entries with its data,
        nobody requeued them, and their settles here are all that is left of them."""
        held = self.holding()
        if not held:
            return
        missing = held - on_list
        lost = Counter({raw: n for raw, n in missing.items() if self._fetched_elsewhere(raw, run_ids)})
        if lost:
            missing -= lost
            log.warning(
                "held_jobs_lost_with_redis_data",
                count=sum(lost.values()),
                jids=sorted({str((codec.loads_dict(raw) or {}).get("jid")) for raw in lost})[:20],
                note="Redis is not the server these jobs were fetched from and has lost their "
                "in-progress entries: settled from here all the same (a failure is filed in retry)",
            )
        if not missing:
            return
        self._settler.disown(missing)
        log.warning(
            "held_jobs_gone_from_list",
            count=sum(missing.values()),
            jids=sorted({str((codec.loads_dict(raw) or {}).get("jid")) for raw in missing})[:20],
            note="jobs this process runs are no longer on its in-progress list: it was silent past "
            "COGWORKER_ORPHAN_THRESHOLD_S and declared dead, so another process requeued them (they "
            "run twice), or Redis lost its data; they are neither acknowledged nor filed from here",
        )

    def _fetched_elsewhere(self, raw: str, run_ids: set[str]) -> bool:
        with self._lock:
            fetched_from = self._run_ids.get(raw)
        fetched_from = fetched_from or self._settler.run_id_of(raw)  # ended: a filing still to make
        return bool(fetched_from and run_ids and fetched_from not in run_ids)

    def _schedule_next(self, result: Reconciled, failures: int, failed: Counter[str]) -> None:
        now = time.monotonic()
        with self._lock:
            self._thread_failed -= failed
            if self._failures != failures:
                due = now  # another failure came meanwhile
            elif self._answered != failures:
                self._answered = failures
                due = now + RECONCILE_CONFIRM_S
            else:
                due = now + self._settings.orphan_check_interval_s
            if result.kept:
                due = min(due, now + KEPT_RETRY_S)
            self._due = due

    def _report(self, result: Reconciled, *, buried_told: bool) -> None:
        """`buried_told`: the partition lists handed their buried jobs on already, with their partition."""
        if result.requeued or result.buried:
            log.warning(
                "requeued_unknown_jobs",
                requeued=result.requeued,
                dead=len(result.buried),
                note="on this process's in-progress list but not held here (a lost fetch reply or a "
                "failed job thread): back on their queues",
            )
        if result.wrong_type_keys:
            log.error(
                "reconcile_kept_jobs",
                count=result.kept,
                keys=result.wrong_type_keys,
                note="a key of the wrong type stopped their requeue; retried once the key guard moves it",
            )
            if self._on_wrong_type is not None:
                self._on_wrong_type()
        if result.buried and self.on_buried is not None and not buried_told:
            self.on_buried(result.buried)
