"""Jobs for the sharded layout's feature tests (tests/e2e/sharded/test_feature_*.py): results, statuses,
rate limiters, cancels, death notices, expiry, async jobs and time limits, all on the queue "fq". Each
run is recorded as a line in a file outside the cluster under test (file_notes.py), `<what> <pid>`."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import file_notes

import cogworker
from cogworker import job, on_death

# One holder at a time; a holder killed mid-run gives its slot back when its lease (4 s) ends.
ONE_AT_ONCE = cogworker.limiter.concurrent("fq-one", 1, lease_s=4)
# One pass an hour, and a job put back past 1 s fails: of two jobs, the second can only fail.
ONE_AN_HOUR = cogworker.limiter.window("fq-hourly", 1, per=3600, max_wait_s=1)
# One a second, no burst: three jobs pushed at once are spread over about two seconds.
ONE_A_SECOND = cogworker.limiter.bucket("fq-bucket", 1, per=1, burst=1)


def _first_time(path: str, tag: str) -> bool:
    try:
        os.close(os.open(f"{path}.{tag}.held", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


@job(queue="fq", result_ttl=60)
def add(a: int, b: int) -> dict[str, Any]:
    return {"sum": a + b}


@job(queue="fq", result_ttl=60, retry=False)
def boom(message: str) -> None:
    raise ValueError(message)


@job(queue="fq", result_ttl=60, status=True)
def held(path: str, tag: str) -> str:
    """On its first run, says it started and holds its thread (a process SIGKILLed meanwhile leaves it on
    its in-progress list); the run after recovery records `ran-<tag>` and returns the tag."""
    if _first_time(path, tag):
        file_notes.note(path, f"started-{tag}")
        time.sleep(300)
    file_notes.note(path, f"ran-{tag}")
    return f"done {tag}"


@job(queue="fq", status=True)
def tracked(path: str, tag: str) -> None:
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", status=True, retry=False)
def tracked_dies(path: str, tag: str) -> None:
    file_notes.note(path, f"tried-{tag}")
    raise ValueError(f"{tag} fails for good")


@job(queue="fq", limit=ONE_AT_ONCE, retry=0, status=True)
def one_at_once(path: str, tag: str, hold: bool = False) -> None:
    """Holds ONE_AT_ONCE while it runs; `hold`: on its first run, for ever (until its process is
    killed); its run after recovery ends at once."""
    file_notes.note(path, f"started-{tag}")
    if hold and _first_time(path, tag):
        time.sleep(300)
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", limit=ONE_AN_HOUR, retry=False)
def hourly(path: str, tag: str) -> None:
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", limit=ONE_A_SECOND, retry=0)
def paced(path: str, tag: str) -> None:
    file_notes.note(path, f"ran-{tag} {time.time()}")


@job(queue="fq", retry=0, status=True)
def cancellable(path: str, tag: str) -> None:
    """Says it started, then checks for its cancel (at most a minute) until it is cancelled."""
    file_notes.note(path, f"started-{tag}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cogworker.current_job().raise_if_cancelled()
        time.sleep(0.05)
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", retry=0)
async def async_cancellable(path: str, tag: str) -> None:
    file_notes.note(path, f"started-{tag}")
    await asyncio.sleep(60)
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", retry=0)
def mark(path: str, tag: str) -> None:
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", result_ttl=60, retry=False)
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@job(queue="fq", retry=False, timeout_s=1, result_ttl=60)
def too_slow(path: str, tag: str) -> None:
    """Past its limit in Python code (short sleeps), where the watchdog's JobTimeout lands."""
    file_notes.note(path, f"started-{tag}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.02)
    file_notes.note(path, f"ran-{tag}")


@job(queue="fq", retry=False, timeout_s=1, result_ttl=60)
async def async_too_slow(path: str, tag: str) -> None:
    file_notes.note(path, f"started-{tag}")
    await asyncio.sleep(30)
    file_notes.note(path, f"ran-{tag}")


@on_death
def noted(job: dict[str, Any], death: Any) -> None:
    args = job.get("args") or []
    if args and isinstance(args[0], str) and args[0].startswith("/"):
        file_notes.note(args[0], f"death-{job.get('jid')}-{death.cause}")


@job(queue="fq", result_ttl=60)
def gated(path: str, tag: str) -> str:
    """Says it started, then waits (at most a minute) for the test to create `<path>.<tag>.go`."""
    file_notes.note(path, f"started-{tag}")
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{path}.{tag}.go") and time.monotonic() < deadline:
        time.sleep(0.02)
    file_notes.note(path, f"ran-{tag}")
    return f"done {tag}"


@job(queue="fq", result_ttl=60, status=True, retry=False)
async def async_tracked(path: str, tag: str) -> str:
    """An `async def` job whose status is written from the worker's loop."""
    file_notes.note(path, f"ran-{tag}")
    await asyncio.sleep(0.01)
    return f"async {tag}"
