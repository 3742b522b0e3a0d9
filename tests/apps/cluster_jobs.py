"""Jobs for the Redis Cluster tests (tests/e2e/cluster/). Each run is recorded as a line in a file,
outside Redis: a count that a failover or a slot migration can't touch."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cogworker import job


def _note(path: str, line: str) -> None:
    with open(path, "a") as out:
        out.write(f"{line}\n")


@job
def note(path: str, tag: str) -> None:
    _note(path, f"{tag} {os.getpid()}")


@job(retry=3, retry_in=lambda count, exc: 1)
def fail_first(path: str, tag: str) -> None:
    """Fails on its first run (a marker file says it ran once); the poller brings the retry back."""
    marker = Path(f"{path}.{tag}.tried")
    if not marker.exists():
        marker.write_text("tried\n")
        raise RuntimeError(f"first try of {tag} fails")
    _note(path, f"retried-{tag} {os.getpid()}")


@job
def die_first(path: str, tag: str) -> None:
    """SIGKILLs its own process on its first run; the run after recovery records it."""
    marker = Path(f"{path}.{tag}.died")
    if not marker.exists():
        marker.write_text(f"{os.getpid()}\n")
        os.kill(os.getpid(), 9)
    _note(path, f"recovered-{tag} {os.getpid()}")


@job
def slow_note(path: str, tag: str, seconds: float) -> None:
    """Says it started, then takes `seconds`: a process SIGKILLed meanwhile leaves it in flight."""
    _note(path, f"started-{tag} {os.getpid()}")
    time.sleep(seconds)
    _note(path, f"{tag} {os.getpid()}")


@job(unique="until_executed", status=True)
def unique_note(path: str, tag: str) -> None:
    _note(path, f"unique-{tag} {os.getpid()}")


@job
def batch_done(bid: str, path: str) -> None:
    """A batch's callback (tests/e2e/cluster/test_cluster_batch.py): gets the batch's id first."""
    _note(path, f"callback {bid} {os.getpid()}")
