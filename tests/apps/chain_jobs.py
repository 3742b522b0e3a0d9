"""Jobs for the chain tests (tests/e2e/worker/test_chains.py, tests/unit/api/test_chain.py,
tests/unit/worker/settling/test_chain_step.py). Each run records itself in Redis (`test:chain:runs`), from
the job itself, so a test sees every run, in every process."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from cogworker import job
from cogworker.api import client


def _redis() -> redis.Redis:
    """The job API's own client: in a worker, the worker's Redis (COGWORKER_REDIS_URL); in a test's
    own process, the one it configured (never a default address)."""
    return client.connection()


def _ran(entry: str) -> int:
    """Record one run; returns how many runs this entry has had. Both writes go in one MULTI: a test
    that sees the run listed and then kills the process must find it counted too, or the next run
    would take itself for the first."""
    pipe = _redis().pipeline(transaction=True)
    pipe.rpush("test:chain:runs", entry)
    pipe.incr(f"test:chain:count:{entry}")
    return int(pipe.execute()[1])


@job
def first(x: int) -> int:
    _ran(f"first {x}")
    return x * 10


@job
def second(previous: int, y: int) -> int:
    _ran(f"second {previous} {y}")
    return previous + y


@job
def third(previous: int) -> dict[str, Any]:
    _ran(f"third {previous}")
    return {"total": previous * 2}


@job
def step(tag: str) -> str:
    _ran(f"step {tag}")
    return tag


@job(retry=2, retry_in=lambda count, exc: 0)
def flaky(tag: str) -> str:
    """Fails its first run (to be retried at once), succeeds its second."""
    if _ran(f"flaky {tag}") == 1:
        raise RuntimeError("first run fails")
    return tag


@job
def stall_once(tag: str) -> str:
    """Its first run stalls (a test SIGKILLs its process); later runs return at once."""
    if _ran(f"stall_once {tag}") == 1:
        time.sleep(120)
    return tag


@job(retry=False)
def doomed(tag: str) -> None:
    _ran(f"doomed {tag}")
    raise ValueError(f"{tag} is doomed")


@job
def nap(tag: str, seconds: float) -> str:
    """Records its start and its end (`test:chain:naps`, with its pid): a run SIGKILLed in between
    has a start and no end."""
    _redis().rpush("test:chain:naps", f"start {tag} {os.getpid()}")
    time.sleep(seconds)
    _ran(f"nap {tag}")
    _redis().rpush("test:chain:naps", f"end {tag} {os.getpid()}")
    return tag
