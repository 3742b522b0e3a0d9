"""Giving concurrent slots back from jobs without a round trip of their own.

A job's `with lim:` ends by handing its token here, so the job thread never waits on the release.
The next acquire of the same limiter in this process takes it over (`reuse`) when its lease is still
fresh: the slot passes from one job to the next with no round trip at all (api/limiter.py registers
each lease REUSE longer than asked, so every holder still has its whole lease). Otherwise that
acquire carries the tokens waiting (`take`: the acquire script releases them first), so a job costs
at most one extra round trip, and under load far fewer (`make bench`). What no acquire took within
CARRY_WINDOW_S is given back by one background thread, one script call per limiter name. A slot is
given back a little later than it could be, never sooner, and a token is taken over by one acquire
at most, so the limit holds. Outside a job the release is made at once (api/limiter.py): a script
that ends right after its `with` leaves no slot held. A release that fails (Redis away) is logged and
dropped: the leases end those slots.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("cogworker.limiter")

# How long a release waits for an acquire to carry it before the thread sends it alone.
CARRY_WINDOW_S = 0.005
# Gives back `tokens` of the concurrent limiter `name` in one call (api/limiter.py).
Release = Callable[[str, list[str]], None]


class Releases:
    def __init__(self, release: Release) -> None:
        self._release = release
        self._lock = threading.Lock()
        # name -> [(when it was given back, monotonic; token; when its lease began, monotonic)]
        self._pending: dict[str, list[tuple[float, str, float]]] = {}
        self._wake = threading.Event()
        self._owner: tuple[int, threading.Thread] | None = None
        atexit.register(self.flush)
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child must neither take over nor give back its parent's slots (the parent does),
        # and may have been forked while another thread held the lock.
        self._lock = threading.Lock()
        self._pending = {}

    def add(self, name: str, token: str, leased_at: float = -math.inf) -> None:
        """`token` of `name` given back; `leased_at` (monotonic): when its lease began on Redis
        (at the latest), for `reuse`. The default: never taken over, only released."""
        with self._lock:
            self._pending.setdefault(name, []).append((time.monotonic(), token, leased_at))
            owner = self._owner
            if owner is None or owner[0] != os.getpid() or not owner[1].is_alive():
                # First use in this process (or in a forked child, which has no thread of its parent).
                thread = threading.Thread(target=self._run, name="cogworker-limiter-release", daemon=True)
                self._owner = (os.getpid(), thread)
                self._wake = threading.Event()
                thread.start()
        self._wake.set()

    def take(self, name: str) -> list[str]:
        """The tokens of `name` waiting to be given back, for an acquire to carry."""
        if not self._pending:  # almost always, outside a worker: no lock
            return []
        with self._lock:
            return [token for _at, token, _leased in self._pending.pop(name, [])]

    def reuse(self, name: str, prefix: str, leased_after: float) -> tuple[str, float] | None:
        """A token of `name` waiting to be given back whose lease began after `leased_after` and
        that starts with `prefix` (the same limit and lease), taken out: (token, when its lease
        began). The newest is taken, so the most of its lease is left."""
        if not self._pending:
            return None
        with self._lock:
            tokens = self._pending.get(name)
            if not tokens:
                return None
            fresh = [i for i, (_at, t, at) in enumerate(tokens) if at > leased_after and t.startswith(prefix)]
            if not fresh:
                return None
            best = max(fresh, key=lambda i: tokens[i][2])
            _at, token, leased_at = tokens.pop(best)
            if not tokens:
                del self._pending[name]
            return token, leased_at

    def _run(self) -> None:
        wake = self._wake
        while True:
            wake.wait()
            wake.clear()
            # Each token gets its window to be carried by an acquire; what is left then goes alone.
            while self.flush(older_than=CARRY_WINDOW_S):
                pass
            wake = self._wake

    def flush(self, older_than: float = 0.0) -> bool:
        """Give back every token that has waited `older_than` seconds, one call per name (after a wait
        for the oldest of all to reach that age); True when others are still waiting."""
        if older_than:
            with self._lock:
                oldest = min((at for tokens in self._pending.values() for at, _t, _l in tokens), default=None)
            if oldest is None:
                return False
            time.sleep(max(0.0, oldest + older_than - time.monotonic()))
        cutoff = time.monotonic() - older_than
        with self._lock:
            # A name with a token due goes with its round trip, but for its younger tokens that may
            # still pass to this process's next holder.
            due: dict[str, list[str]] = {}
            for name, waiting in list(self._pending.items()):
                if waiting[0][0] <= cutoff:  # oldest first
                    kept = [e for e in waiting if e[0] > cutoff and e[2] > -math.inf]
                    due[name] = [t for at, t, leased in waiting if at <= cutoff or leased == -math.inf]
                    if kept:
                        self._pending[name] = kept
                    else:
                        del self._pending[name]
            left = bool(self._pending)
        for name, tokens in due.items():
            try:
                self._release(name, tokens)
            except Exception as exc:
                log.warning(
                    "limiter_release_failed",
                    limiter=name,
                    slots=len(tokens),
                    error=f"{type(exc).__name__}: {exc}",
                    note="their leases end them",
                )
        return left
