"""Giving concurrent slots back from jobs without a round trip of their own.

A job's `with lim:` ends by handing its token here, so the job thread never waits on the release.
The next acquire of the same limiter in this process carries the tokens waiting (`take`: the acquire
script releases them first), so under load a job with a concurrent limiter costs one extra round
trip, its acquire (`make bench`). What no acquire carried within CARRY_WINDOW_S is given back by
one background thread, one script call per limiter name. A slot is given back a little later than it
could be, never sooner, so the limit holds. Outside a job the release is made at once
(api/limiter.py): a script that ends right after its `with` leaves no slot held. A release that
fails (Redis away) is logged and dropped: the leases end those slots.
"""

from __future__ import annotations

import atexit
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
        # name -> [(when it was given back, monotonic; token)]
        self._pending: dict[str, list[tuple[float, str]]] = {}
        self._wake = threading.Event()
        self._owner: tuple[int, threading.Thread] | None = None
        atexit.register(self.flush)

    def add(self, name: str, token: str) -> None:
        with self._lock:
            self._pending.setdefault(name, []).append((time.monotonic(), token))
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
            return [token for _at, token in self._pending.pop(name, [])]

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
        """Give back the tokens of every name whose oldest has waited `older_than` seconds (after a
        wait for the oldest of all to reach that age); True when others are still waiting."""
        if older_than:
            with self._lock:
                oldest = min((at for tokens in self._pending.values() for at, _ in tokens), default=None)
            if oldest is None:
                return False
            time.sleep(max(0.0, oldest + older_than - time.monotonic()))
        cutoff = time.monotonic() - older_than
        with self._lock:
            # A name with a token due goes whole: its round trip is made anyway.
            due = {
                name: [t for _, t in tokens]
                for name, tokens in self._pending.items()
                if tokens[0][0] <= cutoff
            }
            for name in due:
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
