"""Fetching jobs: reliable (the default) and basic (`BRPOP`, for Redis older than 6.2).

Reliable fetch moves each job atomically from its queue onto this process's own in-progress list;
the job leaves that list only when it is acknowledged (it finished, or was filed in retry/dead).
A process that dies mid-job leaves the job where orphan recovery (recovery.py) or the supervisor
finds it. The price is at-least-once delivery: a job whose process died runs again from the start.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog
from redis.client import PubSub

from cogworker import keys
from cogworker.direct import DirectConnection
from cogworker.scripts import Scripts
from cogworker.settings import QueueSpec

log = structlog.get_logger("cogworker.fetch")

MIN_RELIABLE_VERSION = (6, 2)


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
        self._blocking = blocking_client
        self._scripts = scripts
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = keys.in_progress(identity)
        self._names = frozenset(spec.names)
        self._pubsub: PubSub | None = None

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        """Acknowledge `acks` ((raw, jid) pairs) and move up to `limit` jobs onto our list."""
        queue_keys = [keys.queue(name) for name in queue_order(self._spec, self._rng)]
        day = today()
        args: list[str | int] = [limit, len(acks)]
        for raw, jid in acks:
            args += [raw, jid]
        args += [keys.ORPHANINGS_PREFIX, keys.QUEUE_PREFIX]
        try:
            reply = self._run_fetch(
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

    def _run_fetch(self, script_keys: list[str], args: list[str | int]) -> Any:
        if not self._direct_lock.acquire(blocking=False):
            return self._scripts.run("fetch", script_keys, args, client=self._client)
        try:
            return self._scripts.run_direct(self._direct, "fetch", script_keys, args)
        finally:
            self._direct_lock.release()

    def wait(self, timeout_s: float) -> Work | None:
        """Wait for work after an empty fetch. One queue: BLMOVE, atomic and instant. Several: no
        command blocks on many lists and moves atomically, so wait for a push's wake-up message
        (None: fetch again). A missed message costs at most `timeout_s`, never a job."""
        if len(self._spec.names) != 1:
            self._wait_for_wake(timeout_s)
            return None
        name = self._spec.names[0]
        try:
            # Redis takes fractional seconds here; redis-py's annotation says int.
            raw = self._blocking.blmove(
                keys.queue(name),
                self.in_progress_key,
                timeout_s,  # type: ignore[arg-type]
                "RIGHT",
                "LEFT",
            )
        except redis.ResponseError as exc:
            if _refused(exc):
                raise UnsupportedError(str(exc)) from exc
            raise
        return Work(name, str(raw)) if raw is not None else None

    @property
    def can_block(self) -> bool:
        return True

    @property
    def wait_returns_job(self) -> bool:
        """One queue: `wait` is a BLMOVE and returns the job itself. Several: it only wakes."""
        return len(self._spec.names) == 1

    def _wait_for_wake(self, timeout_s: float) -> None:
        if self._pubsub is None:
            self._pubsub = self._blocking.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            self._pubsub.subscribe(keys.WAKE_CHANNEL)
        deadline = time.monotonic() + timeout_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                message = self._pubsub.get_message(timeout=left)
                if message is not None and message.get("data") in self._names:
                    return
        except Exception:
            self._pubsub.close()
            self._pubsub = None
            raise

    def close(self) -> None:
        self._direct.close()
        if self._pubsub is not None:
            self._pubsub.close()
            self._pubsub = None

    def give_back(self, work: Work) -> bool:
        """A fetched job that never started goes back to the end of its queue popped next."""
        moved = self._scripts.run(
            "give_back", [self.in_progress_key, keys.queue(work.queue)], [work.raw], client=self._client
        )
        return bool(moved)


class BasicFetch:
    """`BRPOP`: the job is only in this process's memory until it finishes. Kept for Redis < 6.2;
    a process killed mid-job loses the job, which is why reliable fetch is the default."""

    keeps_in_progress = False

    def __init__(self, client: redis.Redis, blocking_client: redis.Redis, spec: QueueSpec) -> None:
        self._client = client
        self._blocking = blocking_client
        self._spec = spec
        self._rng = random.Random()
        self.in_progress_key = ""

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
        popped = self._blocking.brpop([keys.queue(n) for n in order], timeout=1)
        works = [Work(keys.queue_name(str(popped[0])), str(popped[1]))] if popped else []
        return FetchResult(works, len(acks))

    @property
    def can_block(self) -> bool:
        return False

    @property
    def wait_returns_job(self) -> bool:
        return False

    def wait(self, timeout_s: float) -> Work | None:
        return None

    def close(self) -> None:
        pass

    def give_back(self, work: Work) -> bool:
        self._client.rpush(keys.queue(work.queue), work.raw)
        return True


Fetcher = ReliableFetch | BasicFetch
