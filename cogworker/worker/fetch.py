"""Fetching jobs: reliable (the default) and basic (`BRPOP`, for Redis older than 6.2).

Reliable fetch moves each job atomically from its queue onto this process's own in-progress list;
the job leaves that list only when it is acknowledged (it finished, or was filed in retry/dead).
A process that dies mid-job leaves the job where orphan recovery (recovery.py) or the supervisor
finds it. The price is at-least-once delivery: a job whose process died runs again from the start.

A live process can also find jobs on its list that it doesn't know of: a fetch or BLMOVE whose reply
was lost (Redis stalled past the client's timeout, then ran the command anyway). `reconcile` puts
every entry the process doesn't hold back on its queue.

No path takes a job from a paused queue: the fetch script skips them, and the one-queue BLMOVE and
basic fetch's BRPOP read the paused set in the same write, so a job taken as a pause landed is
handed back unstarted.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog
from redis.client import PubSub

from cogworker.api.payload import DEFAULT_QUEUE
from cogworker.settings import QueueSpec
from cogworker.store import key_guard, keys
from cogworker.store.direct_connection import DirectConnection
from cogworker.store.scripts import Scripts
from cogworker.worker.recovery import ORPHANINGS_TTL_S, PERIODIC_RUNNING_TTL_S

log = structlog.get_logger("cogworker.fetch")

MIN_RELIABLE_VERSION = (6, 2)
DRAIN_EVERY_S = 1.0


@dataclass(slots=True)
class Work:
    """One fetched job: its queue's name and the payload exactly as stored (acks match on it)."""

    queue: str
    raw: str


@dataclass(slots=True)
class FetchResult:
    works: list[Work] = field(default_factory=list)
    acked: int = 0
    all_paused: bool = False
    wrong_type_queues: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Waited:
    """What a blocking wait brought: a job (one queue), or nothing. `paused`: the queue is paused,
    and the job (taken as the pause landed) must go back unstarted."""

    work: Work | None = None
    paused: bool = False


@dataclass(slots=True)
class Reconciled:
    requeued: int = 0
    kept: int = 0  # not held, but left on the list: a key of the wrong type (named) stopped it
    wrong_type_keys: list[str] = field(default_factory=list)
    buried: list[str] = field(default_factory=list)  # raw payloads filed in dead as poison pills


def digest(raw: str) -> str:
    """SHA-1 of a payload as Redis stores it (reconcile.lua matches entries by it). Text read with
    its invalid bytes escaped encodes back to those bytes."""
    return hashlib.sha1(raw.encode("utf-8", "surrogateescape"), usedforsecurity=False).hexdigest()


class UnsupportedError(Exception):
    """Redis refused a command reliable fetch needs (too old, or renamed/disabled)."""


def queue_order(spec: QueueSpec, rng: random.Random) -> list[str]:
    """Queues in the order to try: as given when strict, else a weighted shuffle (like Sidekiq's)."""
    if spec.weights is None:
        return list(spec.names)
    expanded = [name for name, weight in zip(spec.names, spec.weights, strict=True) for _ in range(weight)]
    rng.shuffle(expanded)
    return list(dict.fromkeys(expanded))


def _refused(exc: redis.ResponseError) -> bool:
    """Redis refused a command itself (too old, renamed or disabled), not our use of it."""
    return bool(re.search(r"unknown (redis )?command|unknown or disabled command", str(exc), re.IGNORECASE))


def today() -> str:
    """The UTC date, as the day counters' keys spell it."""
    return time.strftime("%Y-%m-%d", time.gmtime())


def parse_version(text: str) -> tuple[int, ...] | None:
    """`7.0.15` -> (7, 0); None when it isn't a version."""
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return None


def _raise_refused(reply: Any) -> None:
    if isinstance(reply, redis.ResponseError):
        if _refused(reply):
            raise UnsupportedError(str(reply)) from reply
        raise reply


class WakeListener:
    """Waits for a push's (or a resume's) wake-up message naming one of our queues. A missed message
    costs at most the timeout, never a job.

    While the process is busy nobody waits, and wake-ups pile up unread: Redis cuts a subscriber
    whose output buffer stays past its pubsub limit (8 MB for 60 s by default), and an idle fetcher
    would then fetch once per stale message. So the backlog is read in one go: at the start of each
    wait, and every DRAIN_EVERY_S while busy (`discard_backlog`, before a fetch, whose script sees
    the jobs those messages announced)."""

    def __init__(self, client: redis.Redis, names: frozenset[str]) -> None:
        self._client = client
        self._names = names
        self._pubsub: PubSub | None = None
        self._next_drain = 0.0

    def wait(self, timeout_s: float) -> None:
        if self._pubsub is None:
            self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            self._pubsub.subscribe(keys.WAKE_CHANNEL)
        deadline = time.monotonic() + timeout_s
        try:
            if self._drain(self._pubsub):
                return
            while (left := deadline - time.monotonic()) > 0:
                message = self._pubsub.get_message(timeout=left)
                if message is not None and message.get("data") in self._names:
                    return
        except Exception:
            self.close()
            raise

    def discard_backlog(self) -> None:
        if self._pubsub is None or time.monotonic() < self._next_drain:
            return
        try:
            self._drain(self._pubsub)
        except Exception:
            self.close()  # the next wait subscribes again

    def _drain(self, pubsub: PubSub) -> bool:
        """Read every wake-up already here; True when one named our queues."""
        self._next_drain = time.monotonic() + DRAIN_EVERY_S
        ours = False
        while (message := pubsub.get_message(timeout=0)) is not None:
            ours = ours or message.get("data") in self._names
        return ours

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            pubsub.close()


def server_supports_reliable(client: redis.Redis) -> bool:
    version = parse_version(str(client.info("server").get("redis_version", "")))
    # A version we can't read: try reliable fetch, and fall back if LMOVE is refused.
    return version is None or version >= MIN_RELIABLE_VERSION


class ReliableFetch:
    keeps_in_progress = True

    def __init__(
        self,
        client: redis.Redis,
        blocking_client: redis.Redis,
        scripts: Scripts,
        identity: str,
        spec: QueueSpec,
    ) -> None:
        self._client = client
        # The fetcher thread's own connection. A second caller (a final ack flush while the fetcher
        # thread is still stuck) finds it taken and goes through the client's pool instead.
        self._direct = DirectConnection(client)
        self._direct_lock = threading.Lock()
        # The BLMOVE's own connection: one wait turn at a time uses it (on a job thread).
        self._blocking_direct = DirectConnection(blocking_client)
        self._blocking_lock = threading.Lock()
        self._scripts = scripts
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = keys.in_progress(identity)
        self._wake = WakeListener(blocking_client, frozenset(spec.names))

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        """Acknowledge `acks` ((raw, jid) pairs) and move up to `limit` jobs onto our list."""
        if limit > 0:  # on the fetcher thread (a final ack flush may come from another)
            self._wake.discard_backlog()
        queue_keys = [keys.queue(name) for name in queue_order(self._spec, self._rng)]
        day = today()
        args: list[str | int] = [limit, len(acks)]
        for raw, jid in acks:
            args += [raw, jid]
        args += [keys.ORPHANINGS_PREFIX, keys.QUEUE_PREFIX]
        try:
            reply = self._run_script(
                "fetch",
                [
                    self.in_progress_key,
                    keys.PAUSED,
                    keys.STAT_PROCESSED,
                    keys.stat_processed_day(day),
                    *queue_keys,
                ],
                args,
            )
        except redis.ResponseError as exc:
            if _refused(exc):
                raise UnsupportedError(str(exc)) from exc
            raise
        n_bad = int(reply[2])
        bad = [keys.queue_name(str(k)) for k in reply[3 : 3 + n_bad]]
        first = 3 + n_bad
        works = [Work(keys.queue_name(str(reply[i])), str(reply[i + 1])) for i in range(first, len(reply), 2)]
        paused = int(reply[1])
        return FetchResult(
            works, int(reply[0]), all_paused=limit > 0 and paused == len(queue_keys), wrong_type_queues=bad
        )

    def _run_script(self, name: str, script_keys: list[str], args: list[str | int]) -> Any:
        if not self._direct_lock.acquire(blocking=False):
            return self._scripts.run(name, script_keys, args, client=self._client)
        try:
            return self._scripts.run_direct(self._direct, name, script_keys, args)
        finally:
            self._direct_lock.release()

    def _ping(self) -> None:
        if not self._direct_lock.acquire(blocking=False):
            self._client.ping()
            return
        try:
            self._direct.call("PING")
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
        _raise_refused(move)
        # A paused set of the wrong type reads as not paused (the fetch script fails on it, and the key
        # guard moves it aside): raising here would forget a job already moved onto our list.
        return Waited(Work(name, str(move)) if move is not None else None, paused=paused == 1)

    def wait_for_wake(self, timeout_s: float) -> None:
        self._wake.wait(timeout_s)

    def discard_backlog(self) -> None:
        """On the fetcher thread, while busy: drop wake-ups that piled up (WakeListener says why)."""
        self._wake.discard_backlog()

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Put every entry of our in-progress list that `held` (payloads, once per copy) doesn't
        account for back on its queue; entries in `failed` (their job thread failed) count an
        orphaning, so a job that keeps failing its thread ends in dead.

        A PING goes first: a reconcile sent to a stalled Redis, given up on and run later, could
        put back a job fetched in between. Sent once Redis answers, it runs at once."""
        self._ping()
        held_digests = [digest(raw) for raw in held]
        args: list[str | int] = [
            keys.QUEUE_PREFIX,
            DEFAULT_QUEUE,
            keys.ORPHANINGS_PREFIX,
            ORPHANINGS_TTL_S,
            max_orphanings,
            keys.PERIODIC_RUNNING_PREFIX,
            PERIODIC_RUNNING_TTL_S,
            int(time.time()),
            len(held_digests),
            *held_digests,
            *(digest(raw) for raw in failed),
        ]
        reply = self._run_script("reconcile", [self.in_progress_key, keys.DEAD, keys.QUEUES], args)
        n_wrong = int(reply[2])
        return Reconciled(
            requeued=int(reply[0]),
            kept=int(reply[1]),
            wrong_type_keys=[str(k) for k in reply[3 : 3 + n_wrong]],
            buried=[str(raw) for raw in reply[3 + n_wrong :]],
        )

    @property
    def can_block(self) -> bool:
        return True

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
        moved = self._scripts.run(
            "give_back", [self.in_progress_key, keys.queue(work.queue)], [work.raw], client=self._client
        )
        wrong = key_guard.script_wrong_type(moved)
        if wrong is not None:
            # Nothing changed: the job stays in progress (requeued at stop, or by recovery).
            raise key_guard.wrong_type_error(self._client, wrong)
        return bool(moved)


class BasicFetch:
    """`BRPOP`: the job is only in this process's memory until it finishes. Kept for Redis < 6.2;
    a process killed mid-job loses the job, and so does a BRPOP whose reply is lost (Redis stalled
    past the client's timeout and popped anyway), which is why reliable fetch is the default."""

    keeps_in_progress = False

    def __init__(self, client: redis.Redis, blocking_client: redis.Redis, spec: QueueSpec) -> None:
        self._client = client
        # Only the fetcher thread pops (a final ack flush fetches no job), so it owns this one.
        self._blocking_direct = DirectConnection(blocking_client)
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = ""
        self._wake = WakeListener(blocking_client, frozenset(spec.names))

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        if acks:
            day = today()
            pipe = self._client.pipeline(transaction=False)
            pipe.incrby(keys.STAT_PROCESSED, len(acks))
            pipe.incrby(keys.stat_processed_day(day), len(acks))
            pipe.execute()
        if limit <= 0:
            return FetchResult(acked=len(acks))
        paused = set(self._client.smembers(keys.PAUSED))
        order = [n for n in queue_order(self._spec, self._rng) if n not in paused]
        if not order:
            return FetchResult(acked=len(acks), all_paused=True)
        # Subscribed while every queue was paused: unread wake-ups would pile up in Redis.
        self._wake.close()
        # The paused set is read again right behind the BRPOP, in the same write: a pause that
        # lands while BRPOP waits is seen at no extra round trip.
        popped, paused_now = self._blocking_direct.call_many(
            ("BRPOP", *(keys.queue(n) for n in order), 1), ("SMEMBERS", keys.PAUSED)
        )
        _raise_refused(popped)
        if not popped:
            return FetchResult(acked=len(acks))
        work = Work(keys.queue_name(str(popped[0])), str(popped[1]))
        paused_read = not isinstance(paused_now, redis.ResponseError)
        if paused_read and work.queue in paused_now and self._hand_back(work):
            return FetchResult(acked=len(acks), all_paused=all(n in paused_now for n in order))
        return FetchResult([work], len(acks))

    def _hand_back(self, work: Work) -> bool:
        """A job popped as its queue was paused goes back unstarted. If Redis fails now, it runs:
        with basic fetch it exists only in this process's memory."""
        try:
            self.give_back(work)
        except redis.RedisError as exc:
            log.error("paused_job_not_given_back", queue=work.queue, error=str(exc), note="running it")
            return False
        return True

    @property
    def can_block(self) -> bool:
        return False

    @property
    def wait_returns_job(self) -> bool:
        return False

    def wait(self, timeout_s: float) -> Waited:
        return Waited()

    def wait_for_wake(self, timeout_s: float) -> None:
        self._wake.wait(timeout_s)

    def discard_backlog(self) -> None:
        """On the fetcher thread, while busy: drop wake-ups that piled up (WakeListener says why)."""
        self._wake.discard_backlog()

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled:
        """Basic fetch keeps no in-progress list: nothing to square."""
        return Reconciled()

    def close(self) -> None:
        self._blocking_direct.close()
        self._wake.close()

    def give_back(self, work: Work) -> bool:
        self._client.rpush(keys.queue(work.queue), work.raw)
        return True


Fetcher = ReliableFetch | BasicFetch
