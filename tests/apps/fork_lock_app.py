"""A preloaded app with a thread that holds one of cogworker's locks (FORK_LOCK_HELD names which)
almost all the time, as an app thread that pushes jobs, logs or registers hooks may hold it when the
fork server forks a worker. An at-fork hook makes every fork happen while the lock is held, the worst
case, so a worker that inherited it held would hang every time, not by chance. Its jobs take that
lock in the worker, each by the public path that takes it."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from structlog import _output as structlog_output

import cogworker
from cogworker.api import cancel as cancel_module
from cogworker.api import current_job, death, limiter, results, unique
from cogworker.store import batch_scripts

LIMIT = cogworker.limiter.concurrent("fork-locks", 1, lease_s=30)

# Each lock as the module holds it now: the holder reads it anew each time round.
LOCKS: dict[str, Callable[[], Any]] = {
    "structlog": lambda: structlog_output._get_lock_for_file(sys.stderr),
    "death": lambda: death._lock,
    "cancel": lambda: cancel_module._mutex,
    "callbacks": lambda: current_job._callbacks_mutex,
    "results": lambda: results._memory_changed,
    "batch_scripts": lambda: batch_scripts._lock,
    "unique": lambda: unique._releaser._mutex,
    "unique_outages": lambda: unique._releaser.outages._lock,
    "limiter": lambda: limiter._scripts._mutex,
}

_holding = threading.Event()


def _hold(name: str) -> None:
    while True:
        with LOCKS[name]():
            _holding.set()
            time.sleep(0.2)
            _holding.clear()
        time.sleep(0.01)  # a window for the fork server's own use of the lock (its log lines)


def _fork_while_held() -> None:
    _holding.wait(timeout=5)


HELD = os.environ.get("FORK_LOCK_HELD", "")
if HELD:
    threading.Thread(target=_hold, args=(HELD,), name="app-holds-a-lock", daemon=True).start()
    os.register_at_fork(before=_fork_while_held)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


@cogworker.on_death
def note_death(job: dict[str, Any], why: cogworker.Death) -> None:
    _redis().rpush("test:done", f"died {job.get('args')}")


@cogworker.job(retry=0)
def record(tag: str) -> None:
    _redis().rpush("test:done", tag)


@cogworker.job(retry=False)
def dies(tag: str) -> None:
    raise ValueError(tag)


@cogworker.job(retry=0)
def cancels(tag: str) -> None:
    outcome = cogworker.cancel("0" * 24)
    _redis().rpush("test:done", f"{tag} {outcome.case}")


@cogworker.job(retry=0)
def watches_for_a_cancel(tag: str) -> None:
    cogworker.current_job().on_cancel(lambda: None)
    _redis().rpush("test:done", tag)


@cogworker.job(retry=0, unique="until_executed")
def unique_job(tag: str) -> None:
    _redis().rpush("test:done", tag)


@cogworker.job(retry=0, limit=LIMIT)
def limited(tag: str) -> None:
    _redis().rpush("test:done", tag)
