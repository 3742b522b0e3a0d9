"""Jobs and an on_death hook for the sharded layout's worker tests (tests/e2e/sharded/test_worker_path.py).
Each records in a file named by SHARDED_TEST_OUT (not Redis: the test's view of a run must not depend
on the cluster the run is being tested on), one line per event, appended whole."""

from __future__ import annotations

import os
import time
from typing import Any

from cogworker import job, on_death


def _note(line: str) -> None:
    with open(os.environ["SHARDED_TEST_OUT"], "a") as out:
        out.write(line + "\n")


@job
def mark(tag: str, seconds: float = 0.0) -> None:
    time.sleep(seconds)
    _note(f"ran {tag} {os.getpid()}")


@job(retry=2)
def fails(tag: str) -> None:
    raise ValueError(f"{tag} fails, to be retried")


@job(retry=False)
def dies(tag: str) -> None:
    raise ValueError(f"{tag} fails for good")


@on_death
def noted(job: dict[str, Any], death: Any) -> None:
    _note(f"death {job.get('jid')} {death.cause}")
