"""What the Web UI's batch pages read beside a batch's own records (api/batch_status.py): the members
that failed and wait in the retry set, and the pending members a page at a time. Reads only.

A member is counted as failed only when it ends (batch_lib.lua records its error then); until its
retries run out it is pending. A batch whose every member keeps failing would read "running, 0
failed" although nothing in it can succeed as things stand, so the pages also count the pending
members found in the retry set, with the error of their last try, as failing.

The retry set has no index by batch: it is searched with ZSCAN for payloads naming a batch, within a
time budget, and the pages say when the budget ran out before the whole set was read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import redis

from cogworker.api.batch_status import BatchStatus
from cogworker.ops import sets as set_ops
from cogworker.store import keys

# How long one page may spend searching the retry set; ZSCAN calls of SCAN_COUNT entries each.
# Within the Web UI's page target (p99 100 ms): a retry set of a million is read whole by no page
# budget that fits it, so the pages say when the search stopped short (`Failing.searched`).
SEARCH_BUDGET_S = 0.05
SCAN_COUNT = 1000
# SSCAN calls one page of pending members may take (COUNT is only a hint to Redis).
PENDING_CALLS = 20


@dataclass(frozen=True, slots=True)
class FailingMember:
    """A pending member whose last try failed and that waits in the retry set."""

    jid: str
    job: str | None
    error_class: str | None
    error_message: str | None
    retry_count: int | None
    retry_at: float  # when the next try is due (its score in the retry set)

    @property
    def error(self) -> str:
        return f"{self.error_class or 'error'}: {self.error_message or ''}".rstrip(": ")


@dataclass(frozen=True, slots=True)
class Failing:
    """The failing members of some batches: by bid, soonest retry first."""

    by_bid: dict[str, list[FailingMember]] = field(default_factory=dict)
    searched: bool = True  # the whole retry set was read (False: the budget ran out first)

    def of(self, bid: str) -> list[FailingMember]:
        return self.by_bid.get(bid, [])


def failing(
    client: redis.Redis,
    bids: Collection[str],
    budget_s: float = SEARCH_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> Failing:
    """The members of the batches `bids` that wait in the retry set, read with ZSCAN within
    `budget_s`. A member's payload names its own batch (`bid`); a member of a child batch is the
    child's, not its parent's."""
    wanted = set(bids)
    if not wanted:
        return Failing()
    # For one batch, Redis's MATCH skips every other payload before it reaches us; for several, it
    # keeps only batch members. The decoded payload decides either way.
    pattern = f"*{next(iter(wanted))}*" if len(wanted) == 1 else '*"bid"*'
    deadline = clock() + budget_s
    found: dict[str, dict[str, FailingMember]] = {}
    cursor = 0
    while True:
        cursor, items = client.zscan(keys.RETRY, cursor, match=pattern, count=SCAN_COUNT)
        for raw, score in items:
            entry = set_ops.parse_entry("retry", str(raw), float(score))
            bid = (entry.payload or {}).get("bid")
            if entry.jid is None or not isinstance(bid, str) or bid not in wanted:
                continue
            # ZSCAN may return an entry twice (the set rehashed between calls): one row per jid.
            found.setdefault(bid, {})[entry.jid] = FailingMember(
                jid=entry.jid,
                job=entry.job,
                error_class=entry.error_class,
                error_message=entry.error_message,
                retry_count=entry.retry_count,
                retry_at=entry.score,
            )
        if cursor == 0:
            return Failing(_ordered(found), searched=True)
        if clock() >= deadline:
            return Failing(_ordered(found), searched=False)


def _ordered(found: dict[str, dict[str, FailingMember]]) -> dict[str, list[FailingMember]]:
    return {bid: sorted(jobs.values(), key=lambda m: (m.retry_at, m.jid)) for bid, jobs in found.items()}


@dataclass(frozen=True, slots=True)
class PendingPage:
    """Some of a batch's pending members (its pending set, read with SSCAN): jids, and "b:<bid>" for
    a child batch."""

    members: list[str]
    next_cursor: int  # where the next page starts; 0 when this page reached the end
    total: int  # the pending set's size when read


def pending_page(client: redis.Redis, bid: str, cursor: int = 0, count: int = 50) -> PendingPage:
    """About `count` pending members from SSCAN position `cursor`: a set has no order to page by
    number, so a page goes on from where the last one stopped. Members added or removed meanwhile
    may be missed or shown twice (SSCAN's guarantee), never the others."""
    key = keys.batch_pending(bid)
    total = int(client.scard(key))
    members: list[str] = []
    for _ in range(PENDING_CALLS):
        cursor, items = client.sscan(key, cursor, count=count)
        members.extend(str(m) for m in items)
        if cursor == 0 or len(members) >= count:
            break
    return PendingPage(sorted(dict.fromkeys(members)), int(cursor), total)


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch as its pages show it: its records, and its failing members."""

    status: BatchStatus
    failing: list[FailingMember]

    @property
    def finished(self) -> int:
        """Members that ended: succeeded, failed (ended unrun, or went to dead)."""
        return self.status.done

    @property
    def succeeded(self) -> int:
        return max(0, self.status.done - self.status.failed)

    @property
    def state(self) -> str:
        """The batch's state, with its failing members when it is not decided yet: "running, 3
        failing" rather than a plain "running" that hides them."""
        base = self.status.state
        if self.failing and not self.status.complete:
            return f"{base}, {len(self.failing):,} failing"
        return base

    @property
    def tone(self) -> str:
        """The state badge's class: danger while members fail, warn once complete with failures."""
        if self.failing and not self.status.complete:
            return "danger"
        if self.status.complete:
            return "ok" if self.status.failed == 0 else "warn"
        return ""


def views(statuses: list[BatchStatus], found: Failing) -> list[BatchView]:
    return [BatchView(s, found.of(s.bid)) for s in statuses]
