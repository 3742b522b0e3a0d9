"""Holds on a batch (api/batch.py): while a block pushes to a batch, the batch holds off its decision.

Every hold is named in the batch's hash (docs/architecture.md "Batch holds"), so whatever ends the
holder can release exactly that hold, and only once:

- A member job's block on its own batch (`cogworker.current_batch().jobs()` or `.add()`) takes the
  hold `run:<jid>`, owned by the in-progress list its run is on. The block releases it when it ends;
  if the run ends without that (its process was killed inside the block), the script that records
  the run's end releases it: the member's ack or dead filing (batch_lib.lua), or its requeue after
  the process died (requeue.lua). A later run of the same member takes the hold over.
- Any other block (`with cogworker.batch()`, a `jobs()` block outside a run of that batch) takes the
  hold `lease:<token>` with an expiry. One thread per process renews every lease it holds, each
  third of COGWORKER_BATCH_HOLD_LEASE_S; the poller releases a lease that lapsed (`lapse_due`).
- `cogworker batch release BID` (and the Web UI's button) releases every hold a batch has.

A lease that lapses while its block still runs (its renewals failed through a Redis outage longer
than the lease) is released like a dead process's: the batch may then complete before the block
pushed everything, and the block's next push raises BatchClosed (a member registered before that
completion joins it as usual). Nothing waits or guesses: the block learns it lost its hold from the
renewal's answer, which is logged.
"""

from __future__ import annotations

import contextvars
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.store import batch_scripts, key_guard, keys, shards

log = structlog.get_logger("cogworker.batch")

# Lapsed leases released per poll at most: the rest wait for the next poll.
LAPSE_BATCH = 100


@dataclass(slots=True)
class Run:
    """The member run in this context: its jid, its batch, the in-progress list it is on (its hold's
    owner) and how many of its blocks on its own batch are open (only the outermost holds)."""

    jid: str
    bid: str
    owner: str
    depth: int = 0


_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("cogworker_member_run", default=None)


@dataclass(slots=True)
class Hold:
    """One hold taken: `name` ("run:<jid>" or "lease:<token>") and its value (owner or expiry)."""

    bid: str
    up: list[str]
    queues: list[str]
    name: str
    value: str

    @property
    def is_lease(self) -> bool:
        return self.name.startswith("lease:")


def set_run(run: Run | None) -> contextvars.Token[Run | None]:
    return _run.set(run)


def reset_run(token: contextvars.Token[Run | None]) -> None:
    _run.reset(token)


def run_hold(bid: str) -> tuple[Run, bool] | None:
    """The member run whose own batch is `bid`, and whether this block is its outermost on it (the one
    that takes and releases the hold); None outside such a run."""
    run = _run.get()
    if run is None or run.bid != bid:
        return None
    run.depth += 1
    return run, run.depth == 1


def leave_run(run: Run) -> bool:
    """A run's block on its own batch ended: True when it was the outermost (its hold goes)."""
    run.depth -= 1
    return run.depth == 0


def new_lease(lease_s: float) -> tuple[str, str]:
    """A lease's name and its first expiry."""
    return f"lease:{secrets.token_hex(8)}", repr(time.time() + lease_s)


def release(conn: redis.Redis, hold: Hold, ttl_s: float) -> int:
    """Release `hold` (once: a second call, or a repeat after a lost reply, changes nothing)."""
    _renewer.forget(hold)
    when, bound = ("any", "") if hold.is_lease else ("owner", hold.value)
    return _close(conn, hold.bid, hold.up, hold.queues, hold.name, when, bound, ttl_s)


def release_all(conn: redis.Redis, bid: str, ttl_s: float) -> int | None:
    """Every hold batch `bid` has, released (the operator's repair): how many; None when the batch's
    records are gone. Run again, it releases none."""
    fields = conn.hmget(keys.batch(bid), ["up", "queues", "created_at"])
    if fields[2] is None:
        return None
    return _close(conn, bid, _list(fields[0]), _list(fields[1]), "*", "any", "", ttl_s)


def lapse_due(conn: redis.Redis, ttl_s: float, now: float | None = None) -> int:
    """Release the leases that lapsed by `now` (the poller, each poll): one ZRANGEBYSCORE when none
    did. Returns how many holds were released."""
    now = time.time() if now is None else now
    due = conn.zrangebyscore(keys.BATCH_LEASES, "-inf", now, start=0, num=LAPSE_BATCH)
    released = 0
    for entry in due:
        bid, _, token = str(entry).partition(" ")
        fields = conn.hmget(keys.batch(bid), ["up", "queues"])
        up, queues = _list(fields[0]), _list(fields[1])
        done = _close(conn, bid, up, queues, f"lease:{token}", "lapsed", repr(now), ttl_s)
        if done:
            log.warning("batch_hold_lapsed", bid=bid, note="its block's process stopped renewing it")
        released += done
    return released


def _close(
    conn: redis.Redis, bid: str, up: list[str], queues: list[str], name: str, when: str, bound: str,
    ttl_s: float,
) -> int:  # fmt: skip
    layout_keys, layout_args = batch_scripts.close_layout(bid, up, queues, ttl_s)
    if shards.is_sharded():
        # Its callbacks go through the home outbox (store/batch_ends.py); imported only there.
        from cogworker.api import client
        from cogworker.store import batch_ends, fanout

        return batch_ends.close(
            conn, fanout.clients_of(conn), client.settings(),
            [keys.BATCH_LEASES, *layout_keys], [name, when, bound, *layout_args],
        )  # fmt: skip
    reply = batch_scripts.run(
        conn, "batch_close", [keys.BATCH_LEASES, *layout_keys], [name, when, bound, *layout_args]
    )
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
    return int(reply)


def _list(text: Any) -> list[str]:
    value = codec.loads(str(text)) if text else []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


class Renewer:
    """The thread that renews this process's leases, started by the first one. Each lease is renewed
    a third of its length after it was taken or last renewed, so two renewals can fail before it
    lapses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(hold) -> (hold, its connection, lease seconds, when it is next renewed: monotonic)
        self._held: dict[int, tuple[Hold, redis.Redis, float, float]] = {}
        self._wake = threading.Event()
        self._owner: tuple[int, threading.Thread] | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child holds none of its parent's blocks: the parent renews them.
        self._lock = threading.Lock()
        self._held = {}
        self._owner = None

    def add(self, hold: Hold, conn: redis.Redis, lease_s: float) -> None:
        with self._lock:
            self._held[id(hold)] = (hold, conn, lease_s, time.monotonic() + lease_s / 3)
            owner = self._owner
            if owner is None or owner[0] != os.getpid() or not owner[1].is_alive():
                thread = threading.Thread(target=self._loop, name="cogworker-batch-leases", daemon=True)
                self._owner = (os.getpid(), thread)
                thread.start()
        self._wake.set()  # its renewal may be due before the thread's current wait ends

    def forget(self, hold: Hold) -> None:
        with self._lock:
            self._held.pop(id(hold), None)

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            with self._lock:
                due = [entry for entry in self._held.values() if entry[3] <= now]
            for hold, conn, lease_s, _ in due:
                self._renew(hold, conn, lease_s)
            with self._lock:
                for hold, conn, lease_s, _ in due:
                    if id(hold) in self._held:
                        self._held[id(hold)] = (hold, conn, lease_s, time.monotonic() + lease_s / 3)
                upcoming = min((entry[3] for entry in self._held.values()), default=now + 60.0)
            self._wake.wait(max(0.0, upcoming - time.monotonic()))
            self._wake.clear()

    def _renew(self, hold: Hold, conn: redis.Redis, lease_s: float) -> None:
        expiry = repr(time.time() + lease_s)
        script_keys = [keys.batch(hold.bid), keys.batch_pending(hold.bid), keys.BATCHES,
                       keys.batch(hold.bid), keys.batch_pending(hold.bid), keys.BATCH_LEASES]  # fmt: skip
        args = ["renew", repr(time.time()), hold.bid, "", 0, hold.name, expiry]
        try:
            reply = batch_scripts.run(conn, "batch_open", script_keys, args)
        except Exception as exc:  # Redis away: the next renewal tries again, within the lease
            log.warning("batch_hold_renewal_failed", bid=hold.bid, error=f"{type(exc).__name__}: {exc}")
            return
        if reply != 1:
            self.forget(hold)
            log.error(
                "batch_hold_lost",
                bid=hold.bid,
                note="the hold lapsed or was released while its block ran: the batch may complete "
                "before the block's last push, which then fails with BatchClosed",
            )


_renewer = Renewer()


def keep_renewed(hold: Hold, conn: redis.Redis, lease_s: float) -> None:
    _renewer.add(hold, conn, lease_s)
