"""Fetching jobs: what both fetchers share (the work they hand out, wake-ups, the `Fetcher` they
both are). Reliable fetch (the default) is in reliable_fetch.py, basic (`BRPOP`, for Redis older
than 6.2) in basic_fetch.py, the fallback from one to the other at run time in fetch_fallback.py.

Reliable fetch moves each job atomically from its queue onto this process's own in-progress list;
the job leaves that list only when it is acknowledged (it finished, or was filed in retry/dead). A
process that dies mid-job leaves the job where orphan recovery (worker/recovering/recovery.py) or
the supervisor finds it. The price is at-least-once delivery: a job whose process died runs again
from the start.

A live process can also find jobs on its list that it doesn't know of: a fetch or BLMOVE whose reply
was lost (Redis stalled past the client's timeout, then ran the command anyway). `reconcile` puts
every entry the process doesn't hold back on its queue.

No path takes a job from a paused queue: the fetch script skips them, and the one-queue BLMOVE and
basic fetch's BRPOP read the paused set in the same write, so a job taken as a pause landed is
handed back unstarted.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import structlog
from redis.client import PubSub

from cogworker.settings_fields import QueueSpec
from cogworker.store import keys

# SHA-1 of a payload as Redis stores it: reconcile.lua matches entries by it.
from cogworker.store.job_keys import digest as digest
from cogworker.store.shards import Partition

log = structlog.get_logger("cogworker.fetch")

MIN_RELIABLE_VERSION = (6, 2)
DRAIN_EVERY_S = 1.0


@dataclass(slots=True)
class Work:
    """One fetched job: its queue's name and the payload exactly as stored (acks match on it), and
    the run_id of the Redis it was fetched from ("" unknown: DirectConnection.run_id).
    `suspect`: taken from the queue's suspects list, to run alone (worker/recovering/recovery.py).
    `partition`: in the sharded layout, the queue partition it was fetched from (its ack and its filing
    go to that partition's slot: worker/fetching/sharded_fetch.py); None in the one-slot layout."""

    queue: str
    raw: str
    run_id: str = ""
    suspect: bool = False
    partition: Partition | None = None


@dataclass(slots=True)
class FetchResult:
    works: list[Work] = field(default_factory=list)
    acked: int = 0
    all_paused: bool = False
    wrong_type_queues: list[str] = field(default_factory=list)
    # Redis refused a command reliable fetch needs (its error text): the jobs moved before it are in
    # `works`, and the caller falls back to basic fetch.
    unsupported: str = ""
    # Sharded layout only (worker/fetching/sharded_fetch.py): a partition's call failed while others
    # answered. Its acknowledgements go back to the settler, and its reply may be lost with jobs
    # already moved onto our list (a reconcile is due).
    unsent_acks: list[tuple[str, str]] = field(default_factory=list)
    lost_reply: bool = False


@dataclass(slots=True)
class Waited:
    """What a blocking wait brought: a job (one queue), or nothing. `paused`: the queue is paused,
    and the job (taken as the pause landed) must go back unstarted."""

    work: Work | None = None
    paused: bool = False


@dataclass(slots=True)
class Reconciled:
    requeued: int = 0
    kept: int = 0  # not held, but left on the list: a key of the wrong type (named) stopped it, or a key
    # the script was not given (the entry landed after the list was read: store/job_keys.py)
    wrong_type_keys: list[str] = field(default_factory=list)
    buried: list[str] = field(default_factory=list)  # raw payloads filed in dead as poison pills


class UnsupportedError(Exception):
    """Redis refused a command reliable fetch needs (too old, renamed/disabled, denied to the ACL user)."""


def queue_order(spec: QueueSpec, rng: random.Random) -> list[str]:
    """Queues in the order to try: as given when strict, else a weighted shuffle (like Sidekiq's: a
    queue of weight w comes first w times as often as one of weight 1).

    The shuffle sorts by random() ** (1 / weight) (Efraimidis and Spirakis' weighted sampling), one
    draw per queue: shuffling a list with each queue repeated `weight` times, as Sidekiq does, cost
    0.7 ms a fetch with 1,000 queues (the number-of-queues curve, issue 38)."""
    if spec.weights is None:
        return list(spec.names)
    draw = rng.random
    drawn = [draw() ** (1.0 / weight) for weight in spec.weights]
    return [spec.names[i] for i in sorted(range(len(drawn)), key=drawn.__getitem__, reverse=True)]


# How Redis words a command it refuses to run at all: unknown to it (too old, or renamed away, to a
# client or inside a script), or denied to this ACL user (NOPERM to a client; inside a script, "The user
# executing the script can't run this command"). A key the ACL denies is not among them: basic fetch
# would be refused it as well.
REFUSED = re.compile(
    r"unknown (redis )?command|unknown or disabled command|no permissions to run the '|"
    r"can't run this command",
    re.IGNORECASE,
)


def refused(error: BaseException | str) -> bool:
    """Redis refused a command itself (too old, renamed, disabled or denied to the ACL user), not our
    use of it (a key of the wrong type, a full memory)."""
    return bool(REFUSED.search(str(error)))


def today() -> str:
    """The UTC date, as the day counters' keys spell it."""
    return time.strftime("%Y-%m-%d", time.gmtime())


def parse_version(text: str) -> tuple[int, ...] | None:
    """`7.0.15` -> (7, 0); None when it isn't a version."""
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return None


def raise_refused(reply: Any) -> None:
    if isinstance(reply, redis.ResponseError):
        if refused(reply):
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
            self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
            self._subscribe(self._pubsub)
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

    def _subscribe(self, pubsub: PubSub) -> None:
        pubsub.subscribe(keys.WAKE_CHANNEL)

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


class Fetcher(Protocol):
    """What the manager and the reconciler use of a fetcher (ReliableFetch or BasicFetch)."""

    keeps_in_progress: bool
    in_progress_key: str

    @property
    def can_block(self) -> bool: ...

    @property
    def wait_returns_job(self) -> bool: ...

    @property
    def run_id(self) -> str:
        """The run_id of the Redis the fetch loop's connection is on ("" unknown)."""
        ...

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult: ...

    def wait(self, timeout_s: float) -> Waited: ...

    def wait_for_wake(self, timeout_s: float) -> None: ...

    def discard_backlog(self) -> None: ...

    def reconcile(self, held: Iterable[str], failed: Iterable[str], max_orphanings: int) -> Reconciled: ...

    def give_back(self, work: Work) -> bool: ...

    def close(self) -> None: ...


def on_list(in_progress: str, raw: str, spare_key: str) -> tuple[str, str]:
    """The (list key, payload) a script that takes a finished job off this process's in-progress list
    is given (settle.lua, batch_ack.lua, handover.lua). Basic fetch keeps no list (`in_progress` is
    ""): the payload is then "", and the key `spare_key`, one of the script's other keys (same slot),
    which the script doesn't read."""
    return (in_progress, raw) if in_progress else (spare_key, "")
