"""Reliable fetch, the default: each job moves atomically from its queue onto this process's own
in-progress list, and leaves it only when it is acknowledged (it finished, or was filed in
retry/dead). A process that dies mid-job leaves the job where orphan recovery
(worker/recovering/recovery.py) or the supervisor finds it. The price is at-least-once delivery: a
job whose process died runs again from the start.

A live process can also find jobs on its list that it doesn't know of: a fetch or BLMOVE whose reply
was lost (Redis stalled past the client's timeout, then ran the command anyway). `reconcile` puts
every entry the process doesn't hold back on its queue.

No path takes a job from a paused queue: the fetch script skips them, and the one-queue BLMOVE reads
the paused set in the same write, so a job taken as a pause landed is handed back unstarted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from typing import Any

import redis
import structlog

from cogworker.api.payload import DEFAULT_QUEUE
from cogworker.settings_fields import QueueSpec
from cogworker.store import job_keys, key_guard, keys
from cogworker.store.direct_connection import DirectConnection
from cogworker.store.replicas import AckWait
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.fetch import (
    FetchResult,
    Reconciled,
    UnsupportedError,
    Waited,
    WakeListener,
    Work,
    digest,
    queue_order,
    raise_refused,
    refused,
    today,
)
from cogworker.worker.recovering.recovery import ORPHANINGS_TTL_S, PERIODIC_RUNNING_TTL_S, suspect_at

log = structlog.get_logger("cogworker.fetch")


class ReliableFetch:
    keeps_in_progress = True

    def __init__(
        self,
        client: redis.Redis,
        blocking_client: redis.Redis,
        scripts: Scripts,
        identity: str,
        spec: QueueSpec,
        ack_wait: AckWait | None = None,
    ) -> None:
        self._client = client
        # COGWORKER_REDIS_MIN_REPLICAS: a fetch carrying acknowledgements waits for replicas too.
        self._ack_wait = ack_wait
        # The fetcher thread's own connection. A second caller (a final ack flush while the fetcher
        # thread is still stuck) finds it taken and goes through the client's pool instead.
        self._direct = DirectConnection(client)
        self._direct_lock = threading.Lock()
        # The BLMOVE's own connection: one wait turn at a time uses it (on a job thread).
        self._blocking_direct = DirectConnection(blocking_client)
        self._blocking_lock = threading.Lock()
        # The run_id of the server the last script on the fetcher thread ran on (DirectConnection).
        self._last_run_id = ""
        self._scripts = scripts
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = keys.in_progress(identity)
        self._wake = WakeListener(blocking_client, frozenset(spec.names))
        # Each queue's key and suspects list's key, made once: with 1,000 queues, making them for
        # every fetch cost 0.1 ms of it (issue 38).
        self._keys_of = {name: (keys.queue(name), keys.suspects(name)) for name in spec.names}
        # fetch.lua's last mode: 1 while this process runs a suspect alone, 2 while one waits on
        # our queues for our list to empty. Either way nothing may block on a queue (can_block).
        self._mode = 0

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        """Acknowledge `acks` ((raw, jid) pairs) and move up to `limit` jobs onto our list."""
        if limit > 0:  # on the fetcher thread (a final ack flush may come from another)
            self._wake.discard_backlog()
        names = queue_order(self._spec, self._rng)
        keys_of = self._keys_of
        queue_keys = [keys_of[name][0] for name in names]
        day = today()
        # The counters go in KEYS (a script builds no key names: store/job_keys.py says why). A
        # payload without a jid is counted by its digest; only such a payload costs a hash here.
        counters = [
            keys.orphanings(jid) if jid else keys.orphanings_raw(job_keys.digest(raw)) for raw, jid in acks
        ]
        isolating = "1" if self._mode == 1 else ""
        args: list[str | int] = [
            limit,
            len(acks),
            *(raw for raw, _jid in acks),
            len(names),
            *names,
            isolating,
        ]
        try:
            reply = self._run_script(
                "fetch",
                [
                    self.in_progress_key,
                    keys.PAUSED,
                    keys.STAT_PROCESSED,
                    keys.stat_processed_day(day),
                    *queue_keys,
                    *(keys_of[name][1] for name in names),
                    *counters,
                ],
                args,
                wait=bool(acks),
            )
        except redis.ResponseError as exc:
            if refused(exc):
                raise UnsupportedError(str(exc)) from exc
            raise
        n_bad, mode, stopped = int(reply[2]), int(reply[3]), str(reply[4])
        bad = [keys.queue_name(str(k)) for k in reply[5 : 5 + n_bad]]
        first = 5 + n_bad
        suspect = mode == 1
        run_id = self._last_run_id
        works = [
            Work(keys.queue_name(str(reply[i])), str(reply[i + 1]), run_id=run_id, suspect=suspect)
            for i in range(first, len(reply), 2)
        ]
        if limit > 0:
            if mode != self._mode:
                log.info(
                    "suspect_isolation",
                    mode=("off", "running a suspect alone", "draining for a suspect")[mode],
                )
            self._mode = mode
        unsupported = stopped if stopped and refused(stopped) else ""
        if stopped and not unsupported:
            # Another error (a full memory): with nothing moved, a failed fetch like any (its acks,
            # sent again with the next one, take nothing off twice); else the moved jobs run.
            if not works:
                raise redis.ResponseError(stopped)
            log.warning("fetch_stopped_by_error", error=stopped, moved=len(works))
        paused = int(reply[1])
        all_paused = limit > 0 and paused == len(queue_keys)
        # Unsupported: the caller falls back to basic fetch, holding the jobs moved before the refusal.
        return FetchResult(works, int(reply[0]), all_paused, bad, unsupported)

    def _run_script(
        self, name: str, script_keys: list[str], args: list[str | int], wait: bool = False
    ) -> Any:
        ack_wait = self._ack_wait if wait else None
        command = ack_wait.command_now() if ack_wait is not None else None
        if not self._direct_lock.acquire(blocking=False):
            self._last_run_id = ""  # through the pool: which server answered is not known
            reply = self._scripts.run(name, script_keys, args, client=self._client)
            if ack_wait is not None and command is not None:
                ack_wait.observe(self._client.execute_command(*command))  # type: ignore[no-untyped-call]
            return reply
        try:
            if ack_wait is None or command is None:
                reply = self._scripts.run_direct(self._direct, name, script_keys, args)
            else:
                reply, waited = self._scripts.run_direct_then(self._direct, name, script_keys, args, command)
                ack_wait.observe(waited)
            self._last_run_id = self._direct.run_id
            return reply
        finally:
            self._direct_lock.release()

    def wait(self, timeout_s: float) -> Waited:
        """Wait for work after an empty fetch. One queue: BLMOVE, atomic and instant. Several: no
        command blocks on many lists and moves atomically, so wait for a push's wake-up message
        (nothing: fetch again)."""
        if len(self._spec.names) != 1:
            self.wait_for_wake(timeout_s)
            return Waited()
        # Subscribed while the queue was paused: unread wake-ups would pile up in Redis's output
        # buffer until it dropped the connection. (The fetcher thread, its other user, waits.)
        self._wake.close()
        return self._blmove(self._spec.names[0], timeout_s)

    def _blmove(self, name: str, timeout_s: float) -> Waited:
        """BLMOVE with the paused check behind it in the same write. Redis runs a blocked client's
        next command as soon as the block ends, so the check sees a pause that landed while the
        BLMOVE waited, at no extra round trip (W2 pickup latency)."""
        with self._blocking_lock:
            move, paused = self._blocking_direct.call_many(
                ("BLMOVE", keys.queue(name), self.in_progress_key, "RIGHT", "LEFT", timeout_s),
                ("SISMEMBER", keys.PAUSED, name),
            )
        raise_refused(move)
        # A paused set of the wrong type reads as not paused (the fetch script fails on it, and the key
        # guard moves it aside): raising here would forget a job already moved onto our list.
        work = Work(name, str(move), self._blocking_direct.run_id) if move is not None else None
        return Waited(work, paused=paused == 1)

    def wait_for_wake(self, timeout_s: float) -> None:
        self._wake.wait(timeout_s)

    def discard_backlog(self) -> None:
        """On the fetcher thread, while busy: drop wake-ups that piled up (WakeListener says why)."""
        self._wake.discard_backlog()

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Put every entry of our in-progress list that `held` (payloads, once per copy) doesn't
        account for back on its queue; entries in `failed` (their job thread failed) count an
        orphaning, so a job that keeps failing its thread ends in dead.

        The list is read first, to declare the keys its entries need (store/job_keys.py). That read
        also does what a PING did before it: a reconcile sent to a stalled Redis, given up on and
        run later, could put back a job fetched in between; sent once Redis answers, it runs at once.
        An entry the script had no keys for (it landed after the read) stays; one more pass
        declares what the script named."""
        held_digests = [digest(raw) for raw in held]
        failed_digests = [digest(raw) for raw in failed]
        declared = job_keys.Declared()
        total = Reconciled()
        for _ in range(job_keys.MAX_PASSES):
            declared.add_jobs(self._read_list(), DEFAULT_QUEUE)
            job_key_list, job_key_args = declared.keys_and_args()
            args: list[str | int] = [
                DEFAULT_QUEUE,
                ORPHANINGS_TTL_S,
                max_orphanings,
                PERIODIC_RUNNING_TTL_S,
                int(time.time()),
                suspect_at(max_orphanings),
                *job_key_args,
                len(held_digests),
                *held_digests,
                *failed_digests,
            ]
            reply = self._run_script(
                "reconcile", [self.in_progress_key, keys.DEAD, keys.QUEUES, *job_key_list], args
            )
            n_wrong, left, n_needs = int(reply[2]), int(reply[3]), int(reply[4])
            needs_at = 5 + n_wrong
            total.requeued += int(reply[0])
            total.kept = int(reply[1])  # what this pass left on the list
            total.wrong_type_keys = [str(k) for k in reply[5:needs_at]]
            total.buried += [str(raw) for raw in reply[needs_at + 2 * n_needs :]]
            if not left:
                break
            declared.add_needs(reply[needs_at : needs_at + 2 * n_needs])
        return total

    def _read_list(self) -> list[str]:
        if not self._direct_lock.acquire(blocking=False):
            return [str(raw) for raw in self._client.lrange(self.in_progress_key, 0, -1)]
        try:
            return [str(raw) for raw in self._direct.call("LRANGE", self.in_progress_key, 0, -1)]
        finally:
            self._direct_lock.release()

    @property
    def can_block(self) -> bool:
        """Not while a suspect runs here or waits for our list to empty: a BLMOVE would take a job
        beside it. The manager then polls (COGWORKER_FETCH_IDLE_MAX_S) instead."""
        return self._mode == 0

    @property
    def run_id(self) -> str:
        return self._direct.run_id

    @property
    def wait_returns_job(self) -> bool:
        """One queue: `wait` is a BLMOVE and returns the job itself. Several: it only wakes."""
        return len(self._spec.names) == 1

    def close(self) -> None:
        self._direct.close()
        self._wake.close()
        # A thread still blocked on the queue keeps its connection: closing it under the BLMOVE
        # would lose the reply of a move Redis may be making. It ends with the process.
        if self._blocking_lock.acquire(blocking=False):
            try:
                self._blocking_direct.close()
            finally:
                self._blocking_lock.release()

    def give_back(self, work: Work) -> bool:
        """A fetched job that never started goes back to the end of its queue popped next."""
        # A suspect goes back to its suspects list: on its queue it would be fetched beside others.
        queue_key = keys.suspects(work.queue) if work.suspect else keys.queue(work.queue)
        moved = self._scripts.run(
            "give_back", [self.in_progress_key, queue_key], [work.raw], client=self._client
        )
        wrong = key_guard.script_wrong_type(moved)
        if wrong is not None:
            # Nothing changed: the job stays in progress (requeued at stop, or by recovery).
            raise key_guard.wrong_type_error(self._client, wrong)
        return bool(moved)
