"""What a batch's records say (`cogworker.batch_status(bid)`, `cogworker batch show`, the Web UI).

Read in one round trip (a MULTI of three reads), so the counts agree with each other. A batch whose
records expired (COGWORKER_BATCH_TTL_S after it completed), or never existed, is None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from cogworker import codec
from cogworker.api import client
from cogworker.store import keys

KINDS = ("success", "complete", "death")


@dataclass(frozen=True, slots=True)
class CallbackState:
    """One callback of a batch (`BatchStatus.callbacks`): which job, under which jid, and how far."""

    kind: str
    job: str  # the callback job's name
    jid: str
    queue: str
    # waiting (not pushed yet), enqueued (pushed, running or retrying), done, dead, failed (ended unrun)
    state: str


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """What a batch's records say, read at one instant: `cogworker.batch_status(bid)` returns one.

    A member is a job pushed in the batch's block, or a batch opened inside it (which counts one).
    The batch is decided once no block holds it (`holds` is 0) and nothing is pending.
    """

    bid: str
    description: str
    total: int  # members ever added (a child batch counts one)
    pending: int  # members not yet ended
    done: int  # members ended (succeeded, went to dead, or ended unrun)
    failed: int  # of those, the ones that did not succeed
    dead: int  # of those, the ones that went to dead
    created_at: float
    completed_at: float | None
    parent: str | None
    holds: int  # blocks still pushing to it: nothing is decided while one is open
    failures: dict[str, str] = field(default_factory=dict)  # member -> its error (the first 1,000)
    callbacks: list[CallbackState] = field(default_factory=list)
    ttl_s: int | None = None  # seconds its records are still kept (None: no expiry yet)
    # Each hold by name (api/batch_holds.py): "run:<jid>" -> the in-progress list of the member run
    # holding it, "lease:<token>" -> the lease's expiry (epoch seconds).
    held_by: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True once the batch is decided (every member ended, no block holding it)."""
        return self.completed_at is not None

    @property
    def state(self) -> str:
        """The batch's state: "open" (a block holds it), "running" (members pending), "complete", or
        "complete with failures" (a member did not succeed)."""
        if self.completed_at is not None:
            return "complete" if self.failed == 0 else "complete with failures"
        return "open" if self.holds > 0 else "running"

    def as_dict(self) -> dict[str, Any]:
        """Return every field as plain data (for JSON), with `state` and `complete` added.

        Returns:
            The fields by name; `callbacks` as a list of dicts.
        """
        data = asdict(self)
        data["state"] = self.state
        data["complete"] = self.complete
        return data


def batch_status(bid: str, conn: redis.Redis | None = None) -> BatchStatus | None:
    """Read a batch's state, in one round trip, so the counts agree with each other.

    Args:
        bid: The batch's id (`Batch.bid`, or what `create_batch` returned).
        conn: The Redis client to read with. Default: the job API's (`cogworker.configure`).

    Returns:
        The batch's BatchStatus, or None when its records expired (COGWORKER_BATCH_TTL_S after it
        completed) or never existed.

    Raises:
        TypeError: `bid` is not a str.

    Example:
        >>> cogworker.batch_status(bid).state  # doctest: +SKIP
        'complete'
    """
    if not isinstance(bid, str):
        raise TypeError(f"bid must be a str, not {type(bid).__name__}")
    conn = conn if conn is not None else client.connection()
    pipe = conn.pipeline(transaction=True)
    pipe.hgetall(keys.batch(bid))
    pipe.scard(keys.batch_pending(bid))
    pipe.hgetall(keys.batch_failures(bid))  # at most 1,000 (batch_lib.lua keeps no more)
    pipe.ttl(keys.batch(bid))
    fields, pending, failures, ttl = pipe.execute()
    if not fields:
        return None
    text = {_str(k): _str(v) for k, v in fields.items()}
    callbacks = []
    for kind in KINDS:
        stored = text.get(f"cb:{kind}")
        if stored is None:
            continue
        payload = codec.loads_dict(stored + "}") or {}
        callbacks.append(
            CallbackState(
                kind=kind,
                job=str(payload.get("class") or ""),
                jid=text.get(f"cbjid:{kind}", ""),
                queue=text.get(f"cbq:{kind}", ""),
                state=text.get(f"cbstate:{kind}", "waiting"),
            )
        )
    return BatchStatus(
        bid=bid,
        description=text.get("description", ""),
        total=_int(text.get("total")),
        pending=int(pending),
        done=_int(text.get("done")),
        failed=_int(text.get("failed")),
        dead=_int(text.get("dead")),
        created_at=_float(text.get("created_at")) or 0.0,
        completed_at=_float(text.get("completed_at")),
        parent=text.get("parent") or None,
        holds=_int(text.get("holds")),
        failures={_str(k): _str(v) for k, v in failures.items()},
        callbacks=callbacks,
        ttl_s=int(ttl) if ttl is not None and int(ttl) >= 0 else None,
        held_by={k.removeprefix("hold:"): v for k, v in text.items() if k.startswith("hold:")},
    )


def recent(limit: int = 50, conn: redis.Redis | None = None) -> list[str]:
    """The bids of the newest batches (created within COGWORKER_BATCH_TTL_S), newest first."""
    conn = conn if conn is not None else client.connection()
    return [_str(bid) for bid in conn.zrevrange(keys.BATCHES, 0, max(0, limit - 1))]


def _str(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
