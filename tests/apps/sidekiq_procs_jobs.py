"""The Python side of the Sidekiq mode's process tests (tests/e2e/sidekiq/test_sidekiq_procs.py): a job
that runs until the test lets it go, so Sidekiq's API and Web UI can be asked about it while it runs."""

from __future__ import annotations

import os
import time

import redis

import cogworker


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


@cogworker.job(name="ProcsPyBlock", retry=False)
def procs_py_block(tag: str) -> None:
    """Says it started (`procs:started`), then waits for `procs:release:<tag>` (60 s at most)."""
    client = _redis()
    client.rpush("procs:started", f"{tag} {os.getpid()}")
    deadline = time.monotonic() + 60
    while not client.exists(f"procs:release:{tag}") and time.monotonic() < deadline:
        client.blpop([f"procs:wake:{tag}"], timeout=0.2)
    client.rpush("procs:ran", tag)
