"""Per-job retry filters: `@job(retry_on=..., discard_on=..., retry_in=...)`.

- `retry_on=(ExcType, ...)`: only these errors are retried; any other goes to dead at once.
- `discard_on=(ExcType, ...)`: these errors go to dead at once. It wins over `retry_on`: an error
  matching both is not retried (the narrower wish, "never retry this", is the safer one to honour).
- `retry_in=fn(count, exc) -> seconds`: the delay before retry number `count + 1` (count starts at 0,
  as `retry_count` does), instead of the default backoff. Returning None keeps the default; a
  function that raises or returns anything but a number of seconds (0 to ten years) is logged and the
  default backoff used, so a bug in it never keeps a job from being retried.

All three are code (classes, a function), which can't travel in a job's JSON payload: they are
declared on `@job` only, never sent (client.build_job leaves them out), and the worker reads them
from the job it resolved (processor -> retry.on_failure). `.set(...)` refuses them: an option given
there would only reach the push, never the worker that decides.

None of them changes `retry`: a job out of retries, or with retry=False, goes to dead whatever they say.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import structlog

log = structlog.get_logger("cogworker.retry")

# Options read on the worker from the registered job, never put in a payload: these filters, and
# `limit` (api/limit_jobs.py), a limiter or a function returning one.
WORKER_SIDE = frozenset({"retry_on", "discard_on", "retry_in", "limit"})
# The longest delay retry_in may ask for (ten years, the settings' own bound for seconds).
MAX_DELAY_S = 10 * 365 * 24 * 3600.0


def _is_error_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _error_classes(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value is None or _is_error_class(value):
            return
        if isinstance(value, tuple) and value and all(_is_error_class(v) for v in value):
            return
        raise TypeError(
            f"{name} must be an exception class or a non-empty tuple of them "
            f"(e.g. {name}=(ConnectionError, TimeoutError)), not {value!r}"
        )

    return check


def _check_retry_in(value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"retry_in must be a function fn(count, exc) -> seconds, not {value!r}")


OPTIONS: dict[str, Callable[[Any], None] | None] = {
    "retry_on": _error_classes("retry_on"),
    "discard_on": _error_classes("discard_on"),
    "retry_in": _check_retry_in,
}


def refuse_worker_side(options: Mapping[str, Any]) -> None:
    """`.set(...)`: these options can't reach the worker from a push."""
    given = sorted(WORKER_SIDE & set(options))
    if given:
        raise TypeError(
            f"{', '.join(given)} can only be given to @job(...), not .set(...): it is code, which can't "
            "travel in the job's payload, so the worker reads it from the @job declaration"
        )


def not_retried(options: Mapping[str, Any] | None, exc: BaseException) -> str | None:
    """Why a filter sends this error to dead at once (a note for the dead entry), or None."""
    if not options:
        return None
    discard = options.get("discard_on")
    if discard is not None and isinstance(exc, discard):
        return f"not retried: {type(exc).__name__} matches discard_on"
    only = options.get("retry_on")
    if only is not None and not isinstance(exc, only):
        return f"not retried: {type(exc).__name__} is not in retry_on"
    return None


def delay_s(
    options: Mapping[str, Any] | None, count: int, exc: BaseException, default: Callable[[int], float]
) -> float:
    """Seconds until the next try: retry_in's answer when it gives a good one, else `default(count)`."""
    fn = options.get("retry_in") if options else None
    if fn is None:
        return default(count)
    try:
        answer = fn(count, exc)
    except BaseException as failure:  # SystemExit too: filing must not fail (retry.py says why)
        log.error(
            "retry_in_failed",
            error=f"{type(failure).__name__}: {str(failure)[:200]}",
            note="the default backoff is used",
        )
        return default(count)
    if answer is None:
        return default(count)
    if (
        isinstance(answer, bool)
        or not isinstance(answer, int | float)
        or not math.isfinite(answer)
        or not 0 <= answer <= MAX_DELAY_S
    ):
        log.error(
            "retry_in_bad_value",
            value=repr(answer)[:200],
            note="retry_in must return seconds from 0 to ten years, or None; the default backoff is used",
        )
        return default(count)
    return float(answer)
