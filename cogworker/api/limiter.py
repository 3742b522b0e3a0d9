"""Distributed rate limiters: `cogworker.limiter.concurrent(...)`, `.window(...)`, `.bucket(...)`.

    STRIPE = cogworker.limiter.concurrent("stripe", 10, lease_s=60)   # at most 10 at once
    GITHUB = cogworker.limiter.window("github", 5000, per=3600)       # 5,000 per clock hour
    SMS = cogworker.limiter.bucket("sms", 20, per=1, burst=40)        # 20 a second, bursts of 40

    with STRIPE:          # in a job, or in any Python code
        charge(...)

A limiter object is only its name and numbers: building one touches nothing (no registry, no round
trip), so a dynamic name (`concurrent(f"stripe-{account_id}", 2)`) costs nothing more than a fixed
one, and its keys expire once idle. Every check is one Redis round trip, a Lua script per kind
(store/lua/limit_*.lua) on Redis's clock. A concurrent holder's lease ends by itself, so a process
killed while holding a slot gives it back `lease_s` later; a body that outlives its lease loses the
slot (give the lease room).

Over the limit, `with lim:` raises `cogworker.OverLimit` (with `retry_after_s`):

- inside a job, at once: the worker catches it and puts the job back in the schedule set to run
  later (api/limit_jobs.py), so no thread waits;
- elsewhere, after waiting up to `wait_timeout` seconds (default 5, as Sidekiq Enterprise's
  limiters) for a slot: `wait_timeout=0` raises at once.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import os
import socket
import time
import uuid
from typing import Any

import structlog

from cogworker.api import current_job
from cogworker.api.limit_base import DEFAULT_WAIT_TIMEOUT_S, Limiter, OverLimit, number
from cogworker.api.limit_release import Releases
from cogworker.api.limit_scripts import LimitScripts
from cogworker.store import keys

__all__ = [
    "BucketLimiter",
    "ConcurrentLimiter",
    "Limiter",
    "OverLimit",
    "WindowLimiter",
    "bucket",
    "concurrent",
    "window",
]

log = structlog.get_logger("cogworker.limiter")

_HOST = socket.gethostname()
# A holder's token is host:pid:jid:<_RUN>-<serial>: unique without a random draw per acquire.
_RUN = uuid.uuid4().hex[:8]
_serial = itertools.count()
# The most a concurrent lease is registered beyond `lease_s` (at most a tenth of it), so a slot
# given back can pass to the process's next holder without a round trip (ConcurrentLimiter).
REUSE_MS = 250


_scripts = LimitScripts()


class ConcurrentLimiter(Limiter):
    """At most `limit` holders at once, each slot leased: `cogworker.limiter.concurrent(...)`."""

    kind = "concurrent"

    def __init__(
        self, name: str, limit: int, *, lease_s: float, wait_timeout: float, max_wait_s: float | None
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
        self.limit = int(number("limit", limit, whole=True))
        self.lease_ms = max(1, round(number("lease_s", lease_s) * 1000))
        # Each lease is registered this much longer than asked, so that a slot given back within
        # it can pass to this process's next holder with no round trip (api/limit_release.py) and
        # every holder still has its whole lease; a dead holder's slot comes back that much later.
        self.reuse_ms = min(REUSE_MS, self.lease_ms // 10)
        self._prefix = f"{self.limit}|{self.lease_ms}|"
        # The tokens this context holds with when their lease began (monotonic, at the latest),
        # innermost last: one limiter object is shared by every thread (and async task) that
        # enters it, each holding its own slot.
        self._held: contextvars.ContextVar[tuple[tuple[str, float], ...]] = contextvars.ContextVar(
            f"limiter-{name}", default=()
        )

    def describe(self) -> str:
        """Return the limit and the lease in words.

        Returns:
            For instance "10 at once, leases of 60 s".
        """
        return f"{self.limit} at once, leases of {self.lease_ms / 1000:g} s"

    def _attempt(self) -> tuple[bool, float]:
        now = time.monotonic()
        if self.reuse_ms:
            # A slot this process's last holder gave back, its lease younger than the extra it was
            # given: this holder has at least lease_ms of it left. No round trip.
            reused = _releases.reuse(self.name, self._prefix, now - self.reuse_ms / 1000)
            if reused is not None:
                self._held.set((*self._held.get(), reused))
                return True, 0.0
        running = current_job.running_job()
        holder = f"{_HOST}:{os.getpid()}:{running.jid if running else '-'}:{_RUN}-{next(_serial)}"
        token = self._prefix + holder  # what `cogworker limiter show` reads
        carried = _releases.take(self.name)  # slots this process's jobs gave back: freed first
        # Only a job's slot waits to be given back, so only a job's lease gets the extra to pass on.
        extra_ms = self.reuse_ms if running is not None else 0
        try:
            passed, wait_ms, _n = self._run("acquire", token, self.limit, self.lease_ms + extra_ms, carried)
        except BaseException:
            for given_back in carried:
                _releases.add(self.name, given_back)  # released or not: never taken over
            raise
        if passed:
            # Redis's lease began after `now`; one without the extra is never passed on.
            self._held.set((*self._held.get(), (token, now if extra_ms else -math.inf)))
        return bool(passed), int(wait_ms) / 1000

    def _pause(self, retry_after_s: float, pause: float) -> float:
        return min(retry_after_s, pause)

    def release(self) -> None:
        """Give back the slot this thread (or task) took last; nothing if it holds none.

        Never raises: a slot that can't be given back now ends with its lease. In a job it is
        given back off the job's thread.
        """
        held = self._held.get()
        if not held:
            return
        self._held.set(held[:-1])
        token, leased_at = held[-1]
        if current_job.running_job() is not None:
            _releases.add(self.name, token, leased_at)  # off the job's thread (api/limit_release.py)
            return
        try:
            _release(self.name, [token])
        except Exception as exc:  # the lease ends it: code that ran must not fail for this
            log.warning("limiter_release_failed", limiter=self.name, error=f"{type(exc).__name__}: {exc}")

    def _run(self, op: str, token: str, limit: int, lease_ms: int, carried: list[str]) -> list[Any]:
        names = [keys.limiter("concurrent", self.name)]
        return _scripts.run("limit_concurrent", names, [op, token, limit, lease_ms, *carried])


def _release(name: str, tokens: list[str]) -> None:
    _scripts.run("limit_concurrent", [keys.limiter("concurrent", name)], ["release", *tokens])


_releases = Releases(_release)


class WindowLimiter(Limiter):
    """At most `limit` passes per fixed window: `cogworker.limiter.window(...)`."""

    kind = "window"

    def __init__(
        self, name: str, limit: int, *, per: float, wait_timeout: float, max_wait_s: float | None
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
        self.limit = int(number("limit", limit, whole=True))
        self.per_ms = max(1, round(number("per", per) * 1000))

    def describe(self) -> str:
        """Return the limit and the window in words.

        Returns:
            For instance "5000 per 3600 s window".
        """
        return f"{self.limit} per {self.per_ms / 1000:g} s window"

    def _attempt(self) -> tuple[bool, float]:
        passed, wait_ms, _count = _scripts.run(
            "limit_window", [keys.limiter("window", self.name)], [self.limit, self.per_ms]
        )
        return bool(passed), int(wait_ms) / 1000


class BucketLimiter(Limiter):
    """A token bucket: `rate` passes per `per` seconds, in bursts: `cogworker.limiter.bucket(...)`."""

    kind = "bucket"

    def __init__(
        self,
        name: str,
        rate: int,
        *,
        per: float,
        burst: int | None,
        wait_timeout: float,
        max_wait_s: float | None,
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
        self.rate = int(number("rate", rate, whole=True))
        self.per_ms = max(1, round(number("per", per) * 1000))
        self.burst = self.rate if burst is None else int(number("burst", burst, whole=True))

    def describe(self) -> str:
        """Return the rate and the burst in words.

        Returns:
            For instance "20 per 1 s, bursts of 40".
        """
        return f"{self.rate} per {self.per_ms / 1000:g} s, bursts of {self.burst}"

    def _attempt(self) -> tuple[bool, float]:
        passed, wait_ms, _left = _scripts.run(
            "limit_bucket", [keys.limiter("bucket", self.name)], [self.rate, self.per_ms, self.burst]
        )
        return bool(passed), int(wait_ms) / 1000


def concurrent(
    name: str,
    limit: int,
    *,
    lease_s: float = 60.0,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    max_wait_s: float | None = None,
) -> ConcurrentLimiter:
    """Make a limiter of at most `limit` holders at once across every process and host.

    A holder's slot is leased: given back when its `with` block ends, or when the lease runs out (a
    holder that died). A body that outlives its lease loses the slot: give the lease room.

    Args:
        name: The limiter's name (printable, 1 to 200 characters).
        limit: How many may hold it at once (a whole number above 0).
        lease_s: How long a slot is held at most, in seconds.
        wait_timeout: How long `with` waits for a slot outside a job, in seconds (0: not at all).
        max_wait_s: How long a job may be put back for it in all, in seconds.
            Default: COGWORKER_LIMITER_MAX_WAIT_S.

    Returns:
        The limiter; building it touches no Redis.

    Raises:
        TypeError: An argument is out of range or of the wrong type.

    Example:
        >>> STRIPE = cogworker.limiter.concurrent("stripe", 10, lease_s=60)  # doctest: +SKIP
    """
    return ConcurrentLimiter(name, limit, lease_s=lease_s, wait_timeout=wait_timeout, max_wait_s=max_wait_s)


def window(
    name: str,
    limit: int,
    *,
    per: float,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    max_wait_s: float | None = None,
) -> WindowLimiter:
    """Make a limiter of at most `limit` passes per fixed window of `per` seconds.

    Windows are aligned to Redis's clock: `per=3600` is each clock hour. Fixed, not sliding: up to
    twice `limit` may pass around a window's edge; use a bucket for a smooth rate.

    Args:
        name: The limiter's name (printable, 1 to 200 characters).
        limit: How many may pass per window (a whole number above 0).
        per: The window's length, in seconds.
        wait_timeout: How long `with` waits for room outside a job, in seconds (0: not at all).
        max_wait_s: How long a job may be put back for it in all, in seconds.
            Default: COGWORKER_LIMITER_MAX_WAIT_S.

    Returns:
        The limiter; building it touches no Redis.

    Raises:
        TypeError: An argument is out of range or of the wrong type.

    Example:
        >>> GITHUB = cogworker.limiter.window("github", 5000, per=3600)  # doctest: +SKIP
    """
    return WindowLimiter(name, limit, per=per, wait_timeout=wait_timeout, max_wait_s=max_wait_s)


def bucket(
    name: str,
    rate: int,
    *,
    per: float = 1.0,
    burst: int | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    max_wait_s: float | None = None,
) -> BucketLimiter:
    """Make a token bucket: `rate` passes per `per` seconds on average, in bursts of up to `burst`.

    Args:
        name: The limiter's name (printable, 1 to 200 characters).
        rate: How many may pass per `per` seconds on average (a whole number above 0).
        per: The period of the rate, in seconds.
        burst: How many may pass at once after a quiet spell. Default: `rate`.
        wait_timeout: How long `with` waits for room outside a job, in seconds (0: not at all).
        max_wait_s: How long a job may be put back for it in all, in seconds.
            Default: COGWORKER_LIMITER_MAX_WAIT_S.

    Returns:
        The limiter; building it touches no Redis.

    Raises:
        TypeError: An argument is out of range or of the wrong type.

    Example:
        >>> SMS = cogworker.limiter.bucket("sms", 20, per=1, burst=40)  # doctest: +SKIP
    """
    return BucketLimiter(name, rate, per=per, burst=burst, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
