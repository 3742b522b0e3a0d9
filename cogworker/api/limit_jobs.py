"""Limiters and jobs: the `limit=` job option, and putting back a job that met a full limiter.

`@job(limit=STRIPE)` passes the limiter before the job's body runs and holds it around the body (a
concurrent slot is given back when the body ends). `limit=` may also be a function of the job's
arguments that returns the limiter, for a dynamic name:
`@job(limit=lambda account_id, amount: limiter.concurrent(f"stripe-{account_id}", 2))`. It is code,
so it never travels in the payload (like the retry filters): the worker reads it from `@job`.

A job whose limiter is full (the option's, or a `with lim:` in its body) raises OverLimit, and the
worker files it in the schedule set instead of failing it (worker/running/processor.py): not a failure, not a
retry (its retry count is untouched), no thread waiting. It comes back after a backoff (the
window's or bucket's own wait, or for a concurrent limiter 1 s doubling to a minute, capped by its
earliest lease), no sooner than the poller's next look at the schedule set (COGWORKER_POLL_INTERVAL_S).
The payload records when it was first put back (`limited_since`), how often (`limited`) and by
which limiter (`limited_by`). Past the limiter's `max_wait_s` (default COGWORKER_LIMITER_MAX_WAIT_S)
of being put back, OverLimit is a normal failure naming the limiter, which follows the job's retry
policy; a success or failure clears the record.

Each put-back is counted: in Redis (`stat:limited`, total and per day, written by the same settle
script), in the child's status messages (Prometheus `cogworker_jobs_limited_total`), and in the
job's status (`limited`, with the limiter) when the job tracks one.
"""

from __future__ import annotations

import random
from typing import Any

from cogworker.api import client
from cogworker.api.limiter import Limiter
from cogworker.api.retry import Filing
from cogworker.store import keys

FIRST_BACKOFF_S = 1.0
LONGEST_BACKOFF_S = 60.0
SINCE = "limited_since"
COUNT = "limited"
BY = "limited_by"


def check_limit(value: Any) -> None:
    if not isinstance(value, Limiter) and not callable(value):
        raise TypeError(
            f"limit must be a limiter (cogworker.limiter.concurrent/window/bucket) or a function of the "
            f"job's arguments returning one, not {value!r}"
        )


def limiter_for(option: Any, args: list[Any], kwargs: dict[str, Any]) -> Limiter:
    """The limiter a job's `limit=` option names for this run."""
    if isinstance(option, Limiter):
        return option
    found = option(*args, **kwargs)
    if not isinstance(found, Limiter):
        raise TypeError(f"the job's limit= function returned {found!r}, not a limiter")
    return found


def _max_wait_s(exc: BaseException) -> float:
    own = getattr(exc, "max_wait_s", None)
    return float(own) if isinstance(own, int | float) else client.settings().limiter_max_wait_s


def waited_s(job: dict[str, Any], now: float) -> float:
    since = job.get(SINCE)
    return max(0.0, now - float(since)) if isinstance(since, int | float) else 0.0


def puts_back(job: dict[str, Any], exc: BaseException, now: float) -> bool:
    """True when this OverLimit puts the job back; False once it has waited its limiter's max wait
    (it is then a failure). The worker and the status middleware decide alike by this."""
    return getattr(exc, "cogworker_reschedule", False) is True and waited_s(job, now) < _max_wait_s(exc)


def backoff_s(exc: BaseException, count: int, rng: random.Random | None = None) -> float:
    """When to try again: a window or bucket says exactly when it has room (plus a little jitter so
    the jobs put back together don't all return in the same instant); a concurrent limiter only
    bounds it (its earliest lease), so 1 s doubling to a minute, with jitter, within that bound."""
    pick = rng or random
    after = max(0.0, float(getattr(exc, "retry_after_s", 0.0) or 0.0))
    if getattr(exc, "kind", None) != "concurrent":
        return after + pick.uniform(0.0, min(1.0, 0.1 * after + 0.05))
    backoff: float = min(LONGEST_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** min(count, 16)) * pick.uniform(
        0.75, 1.25
    )
    return min(backoff, after) if after > 0 else backoff


def backoff_bound_s(exc: BaseException) -> float:
    """The longest a job put back by `exc` waits in the schedule set (its status outlives that)."""
    after = float(getattr(exc, "retry_after_s", 0.0) or 0.0)
    return max(LONGEST_BACKOFF_S * 1.25, after + 1.0)


def put_back(job: dict[str, Any], exc: BaseException, now: float) -> Filing:
    """The job as filed in the schedule set, due after its backoff."""
    count = job.get(COUNT)
    count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
    payload = {**job, COUNT: count + 1, BY: str(getattr(exc, "limiter_name", "?"))}
    payload.setdefault(SINCE, now)
    return Filing(keys.SCHEDULE, now + backoff_s(exc, count), payload)


def gave_up(job: dict[str, Any], exc: BaseException, now: float) -> None:
    """The job has waited its limiter's max wait: OverLimit becomes its failure, saying so, and the
    record of its waits goes (a retry of it starts a new wait)."""
    waited = waited_s(job, now)
    said = exc.args[0] if exc.args else str(exc)
    exc.args = (f"{said}; put back for {waited:.0f} s in all, past its max wait of {_max_wait_s(exc):g} s",)
    for field in (SINCE, COUNT, BY):
        job.pop(field, None)
