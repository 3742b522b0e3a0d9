"""Jobs for tests/unit/api/test_status.py."""

from __future__ import annotations

import os
from collections.abc import Callable

import redis

from cogworker import job


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0"))


@job(status=True)
def tracked(tag: str) -> None:
    _redis().rpush("test:ran", tag)


@job(status=True, retry=1)
def tracked_flaky(tag: str) -> None:
    raise ValueError(f"flaky {tag}")


@job
def untracked(tag: str) -> None:
    _redis().rpush("test:ran", tag)


@job(status=False)
def never_tracked(tag: str) -> None:
    _redis().rpush("test:ran", tag)


# Set by a test: called from inside `tracked_hook`, e.g. to stop Redis while the job runs.
hook: Callable[[], object] | None = None


@job(status=True)
def tracked_hook() -> None:
    if hook is not None:
        hook()
