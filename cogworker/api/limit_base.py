"""What every limiter kind shares: its name, waiting for room outside a job, `with`, and OverLimit.

The kinds (concurrent, window, bucket) and the functions that build them are in api/limiter.py.
"""

from __future__ import annotations

import math
import time
from types import TracebackType
from typing import Any, ClassVar

from cogworker.api import client, current_job

MAX_NAME_CHARS = 200
DEFAULT_WAIT_TIMEOUT_S = 5.0
# Outside a job, a concurrent limiter that is full is asked again this often (doubling), since a
# holder may give its slot back long before its lease ends.
FIRST_PAUSE_S = 0.01
LONGEST_PAUSE_S = 0.25


class OverLimit(Exception):
    """A limiter had no room: raised by `with limiter:` (or `limiter.acquire()`, or a job's `limit=`).

    Inside a job it is raised at once; let it propagate: the worker puts the job back in the
    schedule set to run later (not a failure, no retry counted), until the limiter's `max_wait_s`,
    past which it is a failure that follows the job's retry policy. Outside a job it is raised after
    waiting `wait_timeout` seconds: try again later (after `retry_after_s`), or give up.

    Attributes:
        limiter_name: The limiter's name.
        kind: "concurrent", "window" or "bucket".
        retry_after_s: When the limiter may have room again, in seconds: exact for a window or
            bucket; for a concurrent limiter a bound (its earliest lease's end; a holder may give
            its slot back sooner).
        max_wait_s: The limiter's `max_wait_s` (None: COGWORKER_LIMITER_MAX_WAIT_S).
    """

    # Read (by getattr, so those modules need not import this one) by the worker, which puts the
    # job back in the schedule set instead of filing a failure, and by the status and unique
    # middleware, which then see a job still pending rather than failed.
    cogworker_reschedule = True

    def __init__(self, limiter: Limiter, retry_after_s: float) -> None:
        self.limiter_name = limiter.name
        self.kind = limiter.kind
        self.retry_after_s = retry_after_s
        self.max_wait_s = limiter.max_wait_s
        super().__init__(
            f"{limiter.kind} limiter {limiter.name!r} is over its limit ({limiter.describe()}); "
            f"may have room in {retry_after_s:.3f} s"
        )


OverLimit.__module__ = "cogworker"


def number(what: str, value: Any, *, whole: bool = False, zero: bool = False) -> float:
    ok_type = isinstance(value, int) if whole else isinstance(value, int | float)
    if (
        isinstance(value, bool)
        or not ok_type
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        kind = "a whole number" if whole else "a number"
        bound = ">= 0" if zero else "above 0"
        raise TypeError(f"{what} must be {kind} {bound}, not {value!r}")
    return float(value)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise TypeError(
            f"a limiter's name must be printable text of 1 to {MAX_NAME_CHARS} characters, not {name!r}"
        )
    return name


class Limiter:
    """A distributed rate limiter: `with limiter:` passes it, or raises OverLimit.

    Build one with `cogworker.limiter.concurrent`, `window` or `bucket`. Building one touches no
    Redis, and one object may be shared by every thread and task.

    Attributes:
        name: The limiter's name: limiters of one kind with the same name share their counts.
        wait_timeout: How long `acquire` waits for room outside a job, in seconds.
        max_wait_s: How long a job may be put back for it in all (None: COGWORKER_LIMITER_MAX_WAIT_S).
    """

    kind: ClassVar[str]

    def __init__(self, name: str, *, wait_timeout: float, max_wait_s: float | None) -> None:
        self.name = check_name(name)
        self.wait_timeout = number("wait_timeout", wait_timeout, zero=True)
        self.max_wait_s = None if max_wait_s is None else number("max_wait_s", max_wait_s)

    def __repr__(self) -> str:
        return f"<{self.kind} limiter {self.name!r}: {self.describe()}>"

    def describe(self) -> str:
        """Return the limiter's numbers in words, as OverLimit's message and the logs show them.

        Returns:
            For instance "10 at once, leases of 60 s".
        """
        raise NotImplementedError

    def _attempt(self) -> tuple[bool, float]:
        """One round trip: (passed, seconds until there may be room)."""
        raise NotImplementedError

    def _pause(self, retry_after_s: float, pause: float) -> float:
        return retry_after_s

    def acquire(self) -> None:
        """Pass the limiter (one Redis round trip), waiting for room outside a job.

        Prefer `with limiter:`, which calls this and `release`.

        Raises:
            OverLimit: No room: at once inside a job, else after `wait_timeout` seconds.
            redis.RedisError: Redis could not be reached.
        """
        client.settings()  # a first call configured by env: the keys below must carry its prefix
        waiting = 0.0 if current_job.running_job() is not None else self.wait_timeout
        deadline = time.monotonic() + waiting
        pause = FIRST_PAUSE_S
        while True:
            passed, retry_after_s = self._attempt()
            if passed:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise OverLimit(self, retry_after_s)
            time.sleep(min(left, max(0.001, self._pause(retry_after_s, pause))))
            pause = min(LONGEST_PAUSE_S, pause * 2)

    def release(self) -> None:
        """Give back what `acquire` took (only a concurrent limiter holds anything)."""

    def __enter__(self) -> Limiter:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
