"""Jobs for the sharded layout's recovery tests with real workers (tests/e2e/sharded/test_recovery_worker.py).
Each run is recorded as a line in a file outside Redis (file_notes.py): a count the recovery under test
can't touch."""

from __future__ import annotations

import os
import time

import file_notes

from cogworker import job


def _first_run(marker: str) -> bool:
    """True on the first call for `marker` (a file created exclusively), False on every later one."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


@job(queue="rec")
def hold_first(path: str, tag: str) -> None:
    """On its first run, says it started and then holds its thread (a process SIGKILLed meanwhile leaves
    it on its in-progress list); every later run records `ran-<tag>`."""
    if _first_run(f"{path}.{tag}.held"):
        file_notes.note(path, f"started-{tag}")
        time.sleep(300)
        return
    file_notes.note(path, f"ran-{tag}")
