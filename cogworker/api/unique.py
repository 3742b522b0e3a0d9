"""Unique jobs: `@job(unique="until_executed")` — a duplicate push returns None until the job has run.

The claim is one `SET cogworker:unique:<digest> <jid> NX PX <ttl>` at push time, where the digest
covers the job's name, arguments and queue (`locks.unique_digest`). It holds the jid of the copy that
won, and it lives for `unique_for` seconds (default `settings.unique_ttl_s`) counted from when the job
is *due*: a `perform_in(7200, ...)` with a one-hour limit must not lose its claim an hour before it
even runs and let a duplicate in.

The claim is given back

- when the job succeeds, and when it fails for good (out of retries, or `retry=False`) — by the
  server middleware below;
- when the job is filed in dead outside the middleware chain (a poison pill, an unreadable or
  handed-over filing) — by `Locks.release_terminal`, which finds the same key through
  `locks.held_locks`;
- when the push itself didn't happen (a later client middleware stopped it, or writing it failed
  and the job is known not to be written: after a lost reply the claim stays, api/push_outcome.py).

It is *kept* while the job waits in the retry set: the job is still pending, and a duplicate pushed
meanwhile would run alongside its retry.

Every release is owner-checked (`owned_delete.lua`): a claim that expired and was taken by a newer
copy is that copy's, and releasing it would let a third copy in while the second still runs. A
release that fails (Redis away) is kept and retried by the poller (`retry_deferred_releases`), so
duplicates aren't blocked for the claim's whole TTL.

The digest is taken where this middleware runs: first in the client chain, before any middleware of
yours. A client middleware that changes a unique job's name, queue or arguments therefore makes its
claim unreleasable (until its TTL); change them before pushing instead.

Testing modes (cogworker.testing): claims need Redis, so in fake and inline mode no claim is taken —
every push is recorded (or run), duplicates included — and nothing is released.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
import structlog

from cogworker.api import client
from cogworker.api.current_job import JobCancelled
from cogworker.api.middleware import ClientNext, ServerNext
from cogworker.api.payload import DEFAULT_RETRIES, terminal_failure
from cogworker.api.push_outcome import may_be_queued
from cogworker.store import key_guard, keys
from cogworker.store.locks import UNTIL_EXECUTED, Locks, held_locks, unique_digest
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts

log = structlog.get_logger("cogworker.unique")


def _check_unique(value: Any) -> None:
    if value not in (None, UNTIL_EXECUTED):
        raise TypeError(f"unique must be 'until_executed' or None, not {value!r}")


def _check_unique_for(value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        raise TypeError(f"unique_for must be a number of seconds above 0, not {value!r}")


# The job options this feature reads from a payload, each with the check `@job(...)` runs on it.
OPTIONS: dict[str, Callable[[Any], None] | None] = {"unique": _check_unique, "unique_for": _check_unique_for}


class _Releaser:
    """This process's `Locks` for releases made by the middleware, bound to the job API's client.

    Rebuilt when that client changes (after a fork, or `cogworker.configure`): a forked child must not
    use its parent's sockets, and its parent's pending releases are the parent's to retry.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._bound: tuple[int, redis.Redis, Scripts, Locks] | None = None
        self.outages = Outages()
        os.register_at_fork(after_in_child=self._renew_after_fork)

    def _renew_after_fork(self) -> None:
        # An app thread of a preloading fork server may hold either lock when it forks a worker
        # (docs/architecture.md, "Locks across a fork"); the parent's outages are its own.
        self._mutex = threading.Lock()
        self.outages = Outages()

    def bound(self) -> tuple[redis.Redis, Scripts, Locks]:
        conn = client.connection()
        bound = self._bound
        if bound is None or bound[0] != os.getpid() or bound[1] is not conn:
            with self._mutex:
                bound = self._bound
                if bound is None or bound[0] != os.getpid() or bound[1] is not conn:
                    scripts = Scripts(conn)
                    bound = (os.getpid(), conn, scripts, Locks(conn, scripts, self.outages))
                    self._bound = bound
        return bound[1], bound[2], bound[3]

    def idle(self) -> Locks | None:
        """The current Locks if one was built in this process, without building one."""
        bound = self._bound
        return bound[3] if bound is not None and bound[0] == os.getpid() else None


_releaser = _Releaser()


def lock_ttl_ms(job: dict[str, Any], default_s: float, now: float) -> int:
    """The claim's lifetime: `unique_for` (or the default) from when the job is due."""
    unique_for = job.get("unique_for")
    seconds = float(unique_for) if isinstance(unique_for, int | float) and unique_for > 0 else default_s
    at = job.get("at")
    if isinstance(at, int | float):
        seconds += max(0.0, float(at) - now)
    return max(1, math.ceil(seconds * 1000))


def claim(job: dict[str, Any], call_next: ClientNext) -> Any:
    """Client middleware: take the claim, or stop a duplicate push (returns None)."""
    if job.get("unique") != UNTIL_EXECUTED or not client.redis_in_use():
        return call_next(job)
    conn = client.connection()
    key = keys.unique(unique_digest(job))
    jid = str(job["jid"])
    ttl_ms = lock_ttl_ms(job, client.settings().unique_ttl_s, time.time())
    # A Redis error here propagates: the push would fail just the same, and pushing without the
    # claim would break the promise the caller asked for. A claim whose reply was lost may have
    # been taken, for a job never pushed: it is given back (owner-checked, so only if it is ours),
    # or the caller's retry would be skipped as a duplicate of nothing for the claim's whole TTL.
    try:
        claimed = conn.set(key, jid, nx=True, px=ttl_ms)
    except (redis.ConnectionError, redis.TimeoutError):
        _give_back(key, jid)
        raise
    if not claimed:
        holder = _holder(conn, key)
        if holder != jid:
            log.debug("unique_duplicate_skipped", job=job.get("class"), holder=holder)
            return None
        # Its own claim: the same payload pushed again, after a push whose outcome was unknown. The
        # write finds out whether it was queued then and queues no second copy (api/push_outcome.py).
    try:
        pushed = call_next(job)
    except BaseException as exc:
        # Queued (NotReplicated: too few replicas confirmed it), or it may be (a lost reply): the
        # claim stays, and a retry with a new jid is a duplicate.
        if not may_be_queued(exc):
            _give_back(key, jid)
        raise
    if pushed is None:
        _give_back(key, jid)
    return pushed


def _holder(conn: redis.Redis, key: str) -> str | None:
    """The jid holding the claim. SET NX also fails on a key of another type, which no push could
    ever claim: that is an error naming the key (and the key guard is asked to move it aside), not
    a duplicate skipped silently for ever."""
    try:
        holder = conn.get(key)
    except redis.ResponseError as exc:
        if key_guard.is_wrong_type(exc):
            raise key_guard.wrong_type_error(conn, key) from exc
        raise
    return str(holder) if holder is not None else None


def _give_back(key: str, jid: str) -> None:
    """The push didn't happen: free the claim now (best-effort; its TTL ends it otherwise).

    Not deferred like the releases of finished jobs: a pushing process (a web app) has no poller to
    retry it, and the list of pending releases would only grow through an outage.
    """
    try:
        conn, scripts, _ = _releaser.bound()
        wrong = key_guard.script_wrong_type(scripts.run("owned_delete", [key], [jid], client=conn))
        if wrong is not None:
            key_guard.request(conn, wrong)
    except Exception as exc:
        _releaser.outages.report("Unique claim", exc)
    else:
        _releaser.outages.recovered("Unique claim")


def abandon(jobs: Iterable[dict[str, Any]]) -> None:
    """Free the claims of jobs that went through the chain but were never written (push_bulk)."""
    if not client.redis_in_use():
        return
    for job in jobs:
        if job.get("unique") == UNTIL_EXECUTED:
            _give_back(keys.unique(unique_digest(job)), str(job["jid"]))


def release_when_done(job: dict[str, Any], call_next: ServerNext) -> None:
    """Server middleware: free the job's locks once it has run — its unique claim and, for a
    periodic `until_executed` entry, the entry's running lock (both listed by `held_locks`)."""
    if not client.redis_in_use() or not held_locks(job):
        call_next()
        return
    try:
        call_next()
    except BaseException as exc:  # a job's SystemExit is a failure too (worker/running/processor.py files it)
        # Only a failure that sends it to dead; one going to retry is still pending. (The filing in
        # dead releases them too, after it is written; releasing twice is harmless, as owner-checked.)
        # A cancelled job has ended for good too.
        # A job a full rate limiter puts back (api/limit_jobs.py) is still pending.
        if isinstance(exc, JobCancelled) or (
            terminal_failure(job, DEFAULT_RETRIES) and not _put_back(job, exc)
        ):
            _release(job)
        raise
    _release(job)


def _put_back(job: dict[str, Any], exc: BaseException) -> bool:
    if not getattr(exc, "cogworker_reschedule", False):
        return False
    from cogworker.api import limit_jobs

    return limit_jobs.puts_back(job, exc, time.time())


def _release(job: dict[str, Any]) -> None:
    try:
        _, _, locks = _releaser.bound()
    except Exception as exc:  # no client could be built: the locks' TTLs end them
        _releaser.outages.report("Lock release", exc)
        return
    locks.release_terminal(job)


def retry_deferred_releases() -> Any:
    """Poller task: retry releases that failed while Redis was away ("skipped" when none wait)."""
    locks = _releaser.idle()
    if locks is None or not locks.deferred:
        return "skipped"
    locks.retry_deferred()
    return None


def deferred_releases() -> int:
    locks = _releaser.idle()
    return locks.deferred if locks is not None else 0
