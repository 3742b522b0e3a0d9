"""`@job(expires_in=...)`: a job not started within that many seconds of being enqueued (or of its
scheduled time) is not run.

The push turns the option into an absolute `expires_at` in the payload (epoch seconds): the anchor is
the push, or the time a scheduled job is due, never the moment a poller happened to move it, so a
late poller or a backlog can't extend a job's life. The deadline stays with the job through its
retries: a job whose retry comes due after it expired is not run again either (a notification that
must go out within the hour must not go out two hours later because its first try failed).

A worker that fetches an expired job acknowledges it without running it, counts it ("expired" in
stats, metrics, `cogworker status` and the dashboard), marks a tracked job's status "expired",
releases its unique claim and logs it once (worker/running/processor.py).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

from cogworker.api import timestamps
from cogworker.api.middleware import ClientNext

EXPIRES_IN = "expires_in"
EXPIRES_AT = "expires_at"


def seconds(value: Any) -> float:
    """The option as seconds: a positive finite number, or a positive timedelta."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise TypeError(f"expires_in must be a positive number of seconds or a timedelta, not {value!r}")
    return float(value)


def _check(value: Any) -> None:
    if value is not None:
        seconds(value)


OPTIONS: dict[str, Callable[[Any], None] | None] = {EXPIRES_IN: _check}


def stamp(job: dict[str, Any], call_next: ClientNext) -> Any:
    """Client middleware: write the payload's `expires_at` (and `expires_in` as plain seconds, a
    timedelta being no JSON) when the option is set, from the push or the scheduled time."""
    value = job.get(EXPIRES_IN)
    if value is not None:
        ttl = seconds(value)
        at = job.get("at")
        anchor = timestamps.field_s(job, "created_at") or 0.0  # seconds, or Sidekiq 8's milliseconds
        if isinstance(at, int | float) and not isinstance(at, bool):
            anchor = max(anchor, float(at))
        job[EXPIRES_IN] = ttl
        job[EXPIRES_AT] = anchor + ttl
    return call_next(job)


def expired(job: dict[str, Any], now: float) -> bool:
    """The job carries a deadline and it has passed. A deadline that is not a number (a payload not
    written by cogworker) is no deadline: the job runs, as it would have without one."""
    deadline = job.get(EXPIRES_AT)
    if isinstance(deadline, bool) or not isinstance(deadline, int | float):
        return False
    return now > deadline
