"""Jobs for the sharded layout's chain tests (tests/e2e/sharded/test_chains.py). Each run records itself
in the file SHARDED_TEST_OUT (not Redis: the test's view of a run must not depend on the cluster under
test), one line per event, appended whole; a job that must know how often it ran counts its own lines."""

from __future__ import annotations

import os
import time
from typing import Any

from cogworker import job


def _note(line: str) -> int:
    """Record one event; returns how many times this exact line is recorded now."""
    path = os.environ["SHARDED_TEST_OUT"]
    with open(path, "a") as out:
        out.write(line + "\n")
    with open(path) as read:
        return sum(1 for seen in read if seen.rstrip("\n") == line)


@job
def first(x: int) -> int:
    _note(f"first {x}")
    return x * 10


@job
def second(previous: int, y: int) -> int:
    _note(f"second {previous} {y}")
    return previous + y


@job
def third(previous: int) -> dict[str, Any]:
    _note(f"third {previous}")
    return {"total": previous * 2}


@job
def step(tag: str) -> str:
    _note(f"step {tag}")
    return tag


@job(retry=2, retry_in=lambda count, exc: 0)
def flaky(tag: str) -> str:
    """Fails its first run (retried at once), succeeds its second."""
    if _note(f"flaky {tag}") == 1:
        raise RuntimeError("first run fails")
    return tag


@job
def stall_once(tag: str) -> str:
    """Its first run stalls (a test SIGKILLs its process); later runs return at once."""
    if _note(f"stall_once {tag}") == 1:
        time.sleep(120)
    return tag


@job(retry=False)
def doomed(tag: str) -> None:
    _note(f"doomed {tag}")
    raise ValueError(f"{tag} is doomed")


@job
def nap(tag: str, seconds: float) -> str:
    """Records its start, sleeps, records its end: a test acts in between."""
    _note(f"start {tag}")
    time.sleep(seconds)
    _note(f"nap {tag}")
    return tag
