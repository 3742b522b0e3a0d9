"""Unique jobs for the sharded layout's tests (tests/e2e/sharded/test_unique.py). Each run is recorded as a
line in a file outside the cluster under test (file_notes.py), `<what> <pid>`."""

from __future__ import annotations

import os
import time

import file_notes

from cogworker import job


@job(queue="uq", unique="until_executed")
def mark(path: str, tag: str) -> None:
    file_notes.note(path, f"ran-{tag}")


@job(queue="uq", unique="until_executed")
def hold_first(path: str, tag: str) -> None:
    """On its first run, says it started and holds its thread (a process SIGKILLed meanwhile leaves it on
    its in-progress list); the run after recovery records `ran-<tag>`."""
    try:
        os.close(os.open(f"{path}.{tag}.held", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        file_notes.note(path, f"ran-{tag}")
        return
    file_notes.note(path, f"started-{tag}")
    time.sleep(300)


@job(queue="uq", unique="until_executed", retry=False)
def dies(path: str, tag: str) -> None:
    file_notes.note(path, f"tried-{tag}")
    raise ValueError(f"{tag} fails for good")


@job(queue="uq", unique="until_executed")
def gated(path: str, tag: str) -> None:
    """Says it started, then waits (at most a minute) for the test to create `<path>.<tag>.go`."""
    file_notes.note(path, f"started-{tag}")
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{path}.{tag}.go") and time.monotonic() < deadline:
        time.sleep(0.02)
    file_notes.note(path, f"ran-{tag}")
