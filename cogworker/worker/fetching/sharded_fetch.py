"""Reliable fetch in the sharded layout (COGWORKER_CLUSTER_SHARDING=queues, store/shards.py).

Each queue partition is a slot of its own, on whichever master owns it, so no one script can read
several partitions. fetch.lua is the same script as in the one-slot layout, called once per partition
with that partition's keys (its queue, suspects list, pause set and counters, and this process's
in-progress list for it: one list per (process, partition)), on that partition's client
(store/shard_clients.py). What the script guarantees (each job on a queue or on exactly one
in-progress list, acknowledgements counted once) therefore holds per partition, unchanged.

Order: the queues in the fetcher's usual order (a weighted draw, or strict), and each queue's
partitions in a rotation that starts one further on every fetch, so a fetcher drains every partition of
a queue evenly. The first partition that gives jobs ends the fetch, as the first non-empty queue ends
fetch.lua's walk. A queue has max(configured, recorded) partitions; the recorded counts (home hash
`partitions`, only growing) are read at start and every REFRESH_S.

Acknowledgements go to the partition each job came from (placements.py), grouped: with the call that
tries the partition for jobs, or, when the fetch ended before reaching it, in a call of their own once
ACK_BATCH have gathered or the oldest has waited ACK_DELAY_S (each call costs its master a script run).

One partition's master failing does not stop the others: the call's acknowledgements go back to the
settler, a reconcile is made due (its reply may have been lost with jobs moved), and the partition is
skipped until it answers a probe (partition_health.py). Only when no partition answered is the fetch a
failure, as a one-slot fetch's.

Idle: one SUBSCRIBE on the home client to the wake channel of every partition read
(`shards.wake_channel`; Redis Cluster forwards every PUBLISH to every node), then a fetch round. A
SUBSCRIBE naming the channels, not a PSUBSCRIBE to `shards.wake_pattern()`: the README's ACL command
list (the one-slot layout's) holds SUBSCRIBE only, and the channels match its `&<prefix>*` pattern.
No blocking move: a BLMOVE can wait on one partition only, and a process reading several would take
jobs from that one alone while idle. Idle, a process costs one fetch round per BLOCK_TIMEOUT_S.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
import structlog
from redis.client import PubSub

from cogworker.settings_fields import QueueSpec
from cogworker.store import job_keys, key_guard, keys, shards
from cogworker.store.replicas import AckWait
from cogworker.store.scripts import Scripts
from cogworker.store.shard_clients import ShardClients
from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import (
    FetchResult,
    Reconciled,
    Waited,
    WakeListener,
    Work,
    queue_order,
    refused,
    today,
)
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.partition_lines import PartitionLines
from cogworker.worker.fetching.placements import Placements

log = structlog.get_logger("cogworker.fetch")

# How often the recorded partition counts are read again (a pusher with more partitions raised one).
REFRESH_S = 5.0

Acks = list[tuple[str, str]]
# A partition's acks sent in a call of their own (its fetch having ended elsewhere) once this many have
# gathered, or the oldest has waited ACK_DELAY_S: a late ack only risks a re-run after a crash.
ACK_BATCH = 8
ACK_DELAY_S = 0.1
REFUSED_LOG_S = 60.0


class ChannelsWakeListener(WakeListener):
    """Wake-ups of every partition read, by one subscription naming their channels (the push script's
    message is the queue's name, as in the one-slot layout). Made again (closed, then subscribed at
    the next wait) when the partitions read change."""

    def __init__(self, client: redis.Redis, names: frozenset[str], channels: Callable[[], list[str]]) -> None:
        super().__init__(client, names)
        self._channels = channels

    def _subscribe(self, pubsub: PubSub) -> None:
        pubsub.subscribe(*self._channels())


class ShardedFetch:
    keeps_in_progress = True

    def __init__(
        self,
        clients: ShardClients,
        scripts: Scripts,
        identity: str,
        spec: QueueSpec,
        placements: Placements,
        health: PartitionHealth,
        ack_wait: AckWait | None = None,
    ) -> None:
        self._clients = clients
        self._scripts = scripts
        self._identity = identity
        self._spec = spec
        self._placements = placements
        self._health = health
        self._rng = random.Random()
        # The home slot's name for this process's list: what reads a list by identity alone (the
        # heartbeat's registration) finds it there; the jobs are on the per-partition lists.
        self.in_progress_key = keys.in_progress(identity)
        self._wake = ChannelsWakeListener(
            clients.home,
            frozenset(spec.names),
            lambda: [shards.wake_channel(p) for p in self.partitions()],
        )
        self._recorded: dict[str, int] = {}
        self._next_refresh = 0.0
        self._of_queue: dict[str, tuple[Partition, ...]] = {}
        self._turn: dict[str, int] = {}  # each queue's rotation
        self._lines = PartitionLines(clients, scripts, ack_wait)
        # fetch.lua's last mode per partition (1: a suspect runs here alone; 2: one waits for our list
        # to empty). A suspect anywhere stops fetching everywhere (isolation is per process).
        self._modes: dict[Partition, int] = {}
        self._deferred_since: dict[Partition, float] = {}  # acks held back since (_defer)
        self._refused_logged: dict[Partition, float] = {}

    # Partitions -------------------------------------------------------------------------------
    def partitions(self) -> list[Partition]:
        """Every partition this process reads, in no particular order."""
        self._refresh()
        return [p for name in self._spec.names for p in self._of_queue[name]]

    def _refresh(self) -> None:
        now = time.monotonic()
        if now < self._next_refresh and self._of_queue:
            return
        self._next_refresh = now + REFRESH_S
        try:
            self._recorded = shards.recorded_partitions(self._clients.home)
        except Exception as exc:  # the home master away: the counts known stay (configured at least)
            log.debug("partition_counts_unread", error=f"{type(exc).__name__}: {exc}")
            # Read on the fetcher thread: a stopped home master must not cost every REFRESH_S a timeout.
            self._next_refresh = now + REFRESH_S * 6
        of_queue = {name: shards.partitions(name, self._recorded.get(name, 0)) for name in self._spec.names}
        if self._of_queue and of_queue != self._of_queue:
            self._wake.close()  # subscribed again, to the new partitions' channels too, at the next wait
        self._of_queue = of_queue

    def _order(self) -> list[Partition]:
        order: list[Partition] = []
        for name in queue_order(self._spec, self._rng):
            parts = self._of_queue[name]
            start = self._turn.get(name)
            if start is None:
                start = self._rng.randrange(len(parts))  # processes start their rotations apart
            self._turn[name] = (start + 1) % len(parts)
            order += parts[start:] + parts[:start]
        return order

    # Fetch and acknowledge --------------------------------------------------------------------
    def fetch(self, limit: int, acks: Acks) -> FetchResult:
        """Acknowledge `acks` at their partitions and move up to `limit` jobs from the first partition,
        in order, that has some."""
        if limit > 0:
            self._wake.discard_backlog()
        self._refresh()
        by_partition: dict[Partition, Acks] = {}
        result = FetchResult()
        for ack, partition in zip(acks, self._placements.assign(raw for raw, _jid in acks), strict=True):
            if partition is None:
                # Not fetched here (or settled already): nothing to take off any list.
                log.warning("ack_without_partition", jid=ack[1])
                continue
            by_partition.setdefault(partition, []).append(ack)
        order = self._order() if limit > 0 else []
        isolating = any(mode == 1 for mode in self._modes.values())
        in_order = set(order)
        calls = order + [p for p in by_partition if p not in in_order]
        answered, paused, tried = 0, 0, 0
        errors: list[Exception] = []
        for partition in calls:
            mine = by_partition.pop(partition, [])
            # The first partition that gives jobs ends the fetch; the rest only get their acks.
            want = limit if partition in in_order and not result.works else 0
            if isolating and self._modes.get(partition) != 1:
                want = 0  # a suspect runs here: nothing else is taken, anywhere
            if want <= 0 and mine and limit > 0 and self._defer(partition, mine):
                result.unsent_acks += mine  # with a later call to this partition (ACK_BATCH)
                continue
            if want <= 0 and not mine:
                continue
            if self._health.is_down(partition):
                result.unsent_acks += mine
                continue
            if want > 0:
                tried += 1
            try:
                reply = self._call(partition, max(want, 0), mine)
            except Exception as exc:
                errors.append(exc)
                result.unsent_acks += mine
                result.lost_reply = True
                self._health.failed(partition, exc)
                continue
            answered += 1
            self._deferred_since.pop(partition, None)
            for raw, _jid in mine:
                self._placements.take(raw)
            paused += self._read(partition, reply, want > 0, result)
        if errors and not answered:
            raise errors[0]  # nothing answered: a failed fetch like any (the caller resends the acks)
        result.all_paused = limit > 0 and tried > 0 and paused == tried
        return result

    def _defer(self, partition: Partition, mine: Acks) -> bool:
        """Whether `partition`'s acks wait for a later call: a call of their own costs its master a
        script run, so a busy fetcher (its fetch ended at another partition) lets a few gather, for at
        most ACK_DELAY_S. An idle fetch, and a flush (limit 0), send every one."""
        if len(mine) >= ACK_BATCH:
            return False
        now = time.monotonic()
        since = self._deferred_since.setdefault(partition, now)
        return now - since < ACK_DELAY_S

    def _read(self, partition: Partition, reply: Any, fetching: bool, result: FetchResult) -> int:
        """Add one partition's reply to `result`; 1 when the partition is paused."""
        n_bad, mode, stopped = int(reply[2]), int(reply[3]), str(reply[4])
        if n_bad:
            result.wrong_type_queues.append(partition.queue)
        first = 5 + n_bad
        run_id = self._lines.run_id(partition)
        works = [
            Work(partition.queue, str(reply[i + 1]), run_id, mode == 1, partition)
            for i in range(first, len(reply), 2)
        ]
        result.acked += int(reply[0])
        if fetching:
            if mode != self._modes.get(partition, 0):
                log.info(
                    "suspect_isolation",
                    partition=str(partition),
                    mode=("off", "running a suspect alone", "draining for a suspect")[mode],
                )
            self._modes[partition] = mode
        if stopped and refused(stopped):
            self._refused(partition, stopped)
        elif stopped:
            # Another error of a move (a full memory): its acks were taken, the jobs moved before it run.
            log.warning("fetch_stopped_by_error", error=stopped, moved=len(works), partition=str(partition))
        self._placements.add(works)
        result.works += works
        return int(reply[1]) if fetching else 0

    def _call(self, partition: Partition, want: int, acks: Acks) -> Any:
        day = today()
        counters = [
            shards.orphanings(partition, jid)
            if jid
            else shards.orphanings_raw(partition, job_keys.digest(raw))
            for raw, jid in acks
        ]
        isolating = "1" if self._modes.get(partition) == 1 else ""
        script_keys = [
            shards.in_progress(partition, self._identity),
            shards.paused(partition),
            shards.stat(partition, "processed"),
            shards.stat_day(partition, "processed", day),
            shards.queue_key(partition),
            shards.suspects(partition),
            *counters,
        ]
        args: list[str | int] = [want, len(acks), *(raw for raw, _jid in acks), 1, partition.queue, isolating]
        try:
            return self._lines.run(partition, "fetch", script_keys, args, wait=bool(acks))
        except redis.ResponseError as exc:
            if refused(exc):
                self._refused(partition, str(exc))
            raise

    def _refused(self, partition: Partition, error: str) -> None:
        """Redis refused a command reliable fetch needs (LMOVE renamed, or denied to the ACL user). The
        one-slot layout falls back to basic fetch; this one has none (a BRPOP can't wait on several
        slots), so it is an error, logged once a minute per partition, and that partition gives nothing."""
        now = time.monotonic()
        if self._refused_logged.get(partition, -REFUSED_LOG_S) > now - REFUSED_LOG_S:
            return
        self._refused_logged[partition] = now
        log.error(
            "fetch_refused_in_sharded_layout",
            partition=str(partition),
            error=error,
            note="COGWORKER_CLUSTER_SHARDING=queues needs reliable fetch (LMOVE allowed to the ACL user); "
            "there is no fallback to basic fetch in this layout",
        )

    # Waiting ----------------------------------------------------------------------------------
    def wait(self, timeout_s: float) -> Waited:
        self.wait_for_wake(timeout_s)
        return Waited()

    def wait_for_wake(self, timeout_s: float) -> None:
        self._wake.wait(timeout_s)

    def discard_backlog(self) -> None:
        self._wake.discard_backlog()

    @property
    def can_block(self) -> bool:
        return not any(self._modes.values())

    @property
    def wait_returns_job(self) -> bool:
        return False  # never a BLMOVE: it would wait on one partition only

    @property
    def run_id(self) -> str:
        return ""  # one per partition's master: none names them all (the comparisons are off)

    # Back to the queue, and squaring the lists ------------------------------------------------
    def give_back(self, work: Work) -> bool:
        partition = work.partition or Partition(work.queue)
        self._placements.take(work.raw)
        queue_key = shards.suspects(partition) if work.suspect else shards.queue_key(partition)
        client = self._clients.of(partition)
        moved = self._scripts.run(
            "give_back", [shards.in_progress(partition, self._identity), queue_key], [work.raw], client=client
        )
        wrong = key_guard.script_wrong_type(moved)
        if wrong is not None:
            # Nothing changed: the job stays in progress (requeued at stop, or by recovery).
            raise key_guard.wrong_type_error(client, wrong)
        return bool(moved)

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Never called: in the sharded layout the reconciler goes through this process's list in each
        partition (worker/recovering/partition_lists.py, set on it by the launcher), which also files
        what it buries in the right partition's dead set."""
        raise RuntimeError("the sharded layout reconciles through PartitionLists (worker/recovering/)")

    def close(self) -> None:
        self._lines.close()
        self._wake.close()
        self._health.close()
