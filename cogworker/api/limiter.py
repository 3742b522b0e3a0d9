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
from types import TracebackType
from typing import Any, ClassVar

import structlog

from cogworker.api import client, current_job
from cogworker.api.limit_release import Releases
from cogworker.api.limit_scripts import LimitScripts
from cogworker.store import keys

log = structlog.get_logger("cogworker.limiter")

MAX_NAME_CHARS = 200
DEFAULT_WAIT_TIMEOUT_S = 5.0
# Outside a job, a concurrent limiter that is full is asked again this often (doubling), since a
# holder may give its slot back long before its lease ends.
FIRST_PAUSE_S = 0.01
LONGEST_PAUSE_S = 0.25
_HOST = socket.gethostname()
# A holder's token is host:pid:jid:<_RUN>-<serial>: unique without a random draw per acquire.
_RUN = uuid.uuid4().hex[:8]
_serial = itertools.count()
# The most a concurrent lease is registered beyond `lease_s` (at most a tenth of it), so a slot
# given back can pass to the process's next holder without a round trip (ConcurrentLimiter).
REUSE_MS = 250


class OverLimit(Exception):
    """A limiter had no room (within `wait_timeout`, outside a job). `retry_after_s`: when it may
    have room again (a window's or bucket's exact time; for a concurrent limiter, when its earliest
    lease ends, a bound: a holder may give its slot back sooner)."""

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


def _number(what: str, value: Any, *, whole: bool = False, zero: bool = False) -> float:
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


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise TypeError(
            f"a limiter's name must be printable text of 1 to {MAX_NAME_CHARS} characters, not {name!r}"
        )
    return name


_scripts = LimitScripts()


class Limiter:
    """What every kind shares: the name, how long to wait outside a job, and `with`."""

    kind: ClassVar[str]

    def __init__(self, name: str, *, wait_timeout: float, max_wait_s: float | None) -> None:
        self.name = _check_name(name)
        self.wait_timeout = _number("wait_timeout", wait_timeout, zero=True)
        self.max_wait_s = None if max_wait_s is None else _number("max_wait_s", max_wait_s)

    def __repr__(self) -> str:
        return f"<{self.kind} limiter {self.name!r}: {self.describe()}>"

    def describe(self) -> str:
        raise NotImplementedError

    def _attempt(self) -> tuple[bool, float]:
        """One round trip: (passed, seconds until there may be room)."""
        raise NotImplementedError

    def _pause(self, retry_after_s: float, pause: float) -> float:
        return retry_after_s

    def acquire(self) -> None:
        """Pass the limiter, or raise OverLimit (at once inside a job; else after `wait_timeout`)."""
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


class ConcurrentLimiter(Limiter):
    kind = "concurrent"

    def __init__(
        self, name: str, limit: int, *, lease_s: float, wait_timeout: float, max_wait_s: float | None
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
        self.limit = int(_number("limit", limit, whole=True))
        self.lease_ms = max(1, round(_number("lease_s", lease_s) * 1000))
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
    kind = "window"

    def __init__(
        self, name: str, limit: int, *, per: float, wait_timeout: float, max_wait_s: float | None
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
        self.limit = int(_number("limit", limit, whole=True))
        self.per_ms = max(1, round(_number("per", per) * 1000))

    def describe(self) -> str:
        return f"{self.limit} per {self.per_ms / 1000:g} s window"

    def _attempt(self) -> tuple[bool, float]:
        passed, wait_ms, _count = _scripts.run(
            "limit_window", [keys.limiter("window", self.name)], [self.limit, self.per_ms]
        )
        return bool(passed), int(wait_ms) / 1000


class BucketLimiter(Limiter):
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
        self.rate = int(_number("rate", rate, whole=True))
        self.per_ms = max(1, round(_number("per", per) * 1000))
        self.burst = self.rate if burst is None else int(_number("burst", burst, whole=True))

    def describe(self) -> str:
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
    """At most `limit` holders at once across every process and host. A holder's slot is leased for
    `lease_s`: given back when its `with` block ends, or when the lease runs out (a holder that died).
    `max_wait_s`: how long a job may be put back for it in all (default COGWORKER_LIMITER_MAX_WAIT_S)."""
    return ConcurrentLimiter(name, limit, lease_s=lease_s, wait_timeout=wait_timeout, max_wait_s=max_wait_s)


def window(
    name: str,
    limit: int,
    *,
    per: float,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    max_wait_s: float | None = None,
) -> WindowLimiter:
    """At most `limit` passes per fixed window of `per` seconds (windows aligned to Redis's clock:
    `per=3600` is each clock hour). Fixed, not sliding: up to twice `limit` may pass around a
    window's edge; use a bucket for a smooth rate."""
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
    """A token bucket: `rate` passes per `per` seconds on average, up to `burst` (default `rate`)
    at once after a quiet spell."""
    return BucketLimiter(name, rate, per=per, burst=burst, wait_timeout=wait_timeout, max_wait_s=max_wait_s)
