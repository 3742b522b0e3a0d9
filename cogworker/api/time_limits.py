"""Job time limits: the `timeout_s` option, the `JobTimeout` error and the async job's limit.

A limit is per run: `@job(timeout_s=…)`, `.set(timeout_s=…)`, or the worker's default
`COGWORKER_JOB_TIMEOUT_S` (off unless set: a limit that interrupts a job mid-write can leave what it
was writing half done, so it is opted into, as in Sidekiq). The option travels in the payload as a
JSON number, so the worker that runs the job reads it from there.

An `async def` job past its limit is cancelled on the loop (`with_limit`); a sync job gets
`JobTimeout` raised in its thread by the worker's watchdog (worker/running/time_limits.py). Either way the
run fails with `JobTimeout` and follows the job's retry policy.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

# The most any limit may be: a larger wait overflows thread timeouts (as for the settings).
MAX_TIMEOUT_S = 10 * 365 * 24 * 3600.0


class JobTimeout(Exception):
    """A job ran past its time limit (`timeout_s`, or `COGWORKER_JOB_TIMEOUT_S`) and was stopped.

    Raised in the job (its thread, or its task for an `async def` job); the run fails with it and
    follows the job's retry policy. Let it propagate; give the job a larger `timeout_s`, or split its
    work, if it is hit on runs that should succeed.

    An Exception, so `retry_on`-style lists and middleware see it like any failure; a job that
    catches it and carries on is only stopped for good when it goes on past the grace period
    (`COGWORKER_JOB_TIMEOUT_GRACE_S`), by replacing its process. A sync job whose call returns past
    its limit (it caught this, or sat in a C call it could not be raised in) fails with it all the
    same (worker/running/time_limits.py)."""


def is_limit(value: Any) -> bool:
    """A usable limit: a number of seconds above 0 (not a bool, not nan/inf)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 < value <= MAX_TIMEOUT_S
    )


def _check_timeout(value: Any) -> None:
    if value is not None and not is_limit(value):
        raise TypeError(
            f"timeout_s must be a number of seconds above 0 (at most {MAX_TIMEOUT_S:.0f}), not {value!r}"
        )


# The job option this feature reads from a payload, with the check `@job(...)`/`.set(...)` run on it.
OPTIONS: dict[str, Callable[[Any], None] | None] = {"timeout_s": _check_timeout}


def limit_for(job: dict[str, Any], default: float | None) -> float | None:
    """The limit of one run: the payload's `timeout_s`, else the worker's default (None: no limit).
    A payload value that isn't a usable limit (pushed by hand, or by a foreign client) is ignored."""
    value = job.get("timeout_s")
    if value is not None and is_limit(value):
        return float(value)
    return default


def message(limit_s: float) -> str:
    return f"the job ran past its time limit of {limit_s:g}s"


async def with_limit(coro: Coroutine[Any, Any, Any], limit_s: float) -> Any:
    """Await `coro` on the loop, cancelled when it runs past `limit_s`: then JobTimeout. A job's own
    TimeoutError (raised by something it awaited) stays its own error."""
    scope = asyncio.timeout(limit_s)
    try:
        async with scope:
            return await coro
    except TimeoutError as exc:
        if scope.expired():
            raise JobTimeout(message(limit_s)) from exc
        raise
