"""`cogworker.cancel(jid)`: the job API's side of ops/cancel.py, on the job API's client.

In fake testing mode (cogworker.testing) the recorded job with that jid is dropped, so a test can
check that its code cancels what it should; in inline mode a job has run by the time its push
returns, so there is nothing left to cancel.
"""

from __future__ import annotations

import os
import threading

import redis

from cogworker import testing
from cogworker.api import client
from cogworker.ops.cancel import CancelOutcome, check_jid
from cogworker.ops.cancel import cancel as cancel_job
from cogworker.store.scripts import Scripts

_mutex = threading.Lock()
_scripts: tuple[redis.Redis, Scripts] | None = None


def _renew_lock() -> None:
    # A preloading fork server forks workers while app threads run: one may hold this lock then
    # (docs/architecture.md, "Locks across a fork").
    global _mutex
    _mutex = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock)


def _bound_scripts(conn: redis.Redis) -> Scripts:
    """The scripts bound to the job API's client, rebuilt when that client changes (`configure`)."""
    global _scripts
    with _mutex:
        if _scripts is None or _scripts[0] is not conn:
            _scripts = (conn, Scripts(conn))
        return _scripts[1]


def cancel(jid: str) -> CancelOutcome:
    """Cancel a job, wherever it is.

    A waiting job (queued, scheduled, retrying) is taken off its queue or set and never runs; a
    running one is cancelled by its worker (an `async def` job at once, a sync job at its next
    `cogworker.current_job().raise_if_cancelled()`). In the fake testing mode the recorded push is
    dropped.

    Args:
        jid: The job's id, as its push returned it.

    Returns:
        A CancelOutcome whose `case` says which applied, or that the job had finished or isn't known.

    Raises:
        TypeError: `jid` is not a str.
        ValueError: `jid` is not a job id (letters, digits and `_.:-` only, at most 100).

    Example:
        >>> cogworker.cancel(jid).case  # doctest: +SKIP
        'queued'
    """
    jid = check_jid(jid)
    if not client.redis_in_use():
        taken = testing.take_recorded(jid)
        if taken is None:
            return CancelOutcome(jid, "not_found", "not found among the jobs recorded (testing mode)")
        return CancelOutcome(
            jid, "queued", "queued: dropped from the recorded jobs (testing mode)",
            job=str(taken.get("class")), queue=str(taken.get("queue")),
        )  # fmt: skip
    conn = client.connection()
    return cancel_job(conn, _bound_scripts(conn), jid)
