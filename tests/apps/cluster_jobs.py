"""Jobs for the Redis Cluster tests (tests/e2e/cluster/). Each run is recorded as a line in a file,
outside Redis: a count that a failover or a slot migration can't touch (tests/apps/file_notes.py)."""

from __future__ import annotations

import time

import file_notes

from cogworker import job


@job
def note(path: str, tag: str) -> None:
    file_notes.note(path, tag)


@job(retry=3, retry_in=lambda count, exc: 1)
def fail_first(path: str, tag: str) -> None:
    """Fails on its first run; the poller brings the retry back a second later."""
    file_notes.fail_first(path, tag)


@job
def die_first(path: str, tag: str) -> None:
    """SIGKILLs its own process on its first run; the run after recovery records it."""
    file_notes.die_first(path, tag)


@job
def slow_note(path: str, tag: str, seconds: float) -> None:
    """Says it started, then takes `seconds`: a process SIGKILLed meanwhile leaves it in flight."""
    file_notes.note(path, f"started-{tag}")
    time.sleep(seconds)
    file_notes.note(path, tag)


@job(unique="until_executed", status=True)
def unique_note(path: str, tag: str) -> None:
    file_notes.note(path, f"unique-{tag}")


@job
def batch_done(bid: str, path: str) -> None:
    """A batch's callback (tests/e2e/cluster/test_cluster_batch.py): gets the batch's id first."""
    file_notes.note(path, f"callback {bid}")
