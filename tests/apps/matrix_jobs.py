"""Jobs for the lost-reply matrix (tests/e2e/lost_reply/). The worker talks to Redis through a
fault-injecting proxy, but every job records its runs on a connection of its own straight to Redis
(`MATRIX_RECORD_URL`), so a fault armed on the worker's commands never touches the record the test
reads: `matrix:ran:<tag>` counts the runs of a tag, `matrix:callback:<tag>` a callback's."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import redis

import cogworker
from cogworker import job

# One slot with a short lease: a slot held by a lost acquire's token (or a lost release) comes back
# when its lease ends.
ONE_AT_A_TIME = cogworker.limiter.concurrent("matrix", 1, lease_s=1)


@functools.cache
def _record() -> redis.Redis:
    url = os.environ.get("MATRIX_RECORD_URL") or os.environ["COGWORKER_REDIS_URL"]
    return redis.Redis.from_url(url, decode_responses=True)


def _ran(tag: str) -> int:
    return int(_record().incr(f"matrix:ran:{tag}"))


@job(retry=False)
def mark(tag: str) -> str:
    _ran(tag)
    return tag


@job(retry=1, retry_in=lambda count, exc: 0)
def flaky(tag: str) -> None:
    """Fails its first run (a retry filing), succeeds on its second."""
    if _ran(tag) == 1:
        raise ValueError(f"first run of {tag}")


@job(retry=False)
def dies(tag: str) -> None:
    """Fails for good: a dead filing, with its death notice."""
    _ran(tag)
    raise RuntimeError(f"{tag} dies")


@job(retry=False, unique="until_executed")
def unique_mark(tag: str) -> None:
    _ran(tag)


@job(retry=False, result_ttl=600)
def kept(tag: str) -> str:
    _ran(tag)
    return f"result of {tag}"


@job(retry=1, retry_in=lambda count, exc: 0, limit=ONE_AT_A_TIME)
def limited(tag: str) -> None:
    _ran(tag)


@job(retry=False)
def step(tag: str, index: int) -> int:
    _ran(f"{tag}:{index}")
    return index


@job(retry=False)
def callback(bid: str, tag: str) -> None:
    """A batch callback: counts its own runs."""
    _record().incr(f"matrix:callback:{tag}")


def ran(client: redis.Redis, tag: str) -> int:
    value: Any = client.get(f"matrix:ran:{tag}")
    return int(value or 0)


@job(retry=False, unique="until_executed")
def unique_dies(tag: str) -> None:
    """A unique job filed in dead: its claim is released with the filing."""
    _ran(tag)
    raise RuntimeError(f"{tag} dies")


@job(retry=False)
def held(tag: str) -> None:
    """Runs until `matrix:go:<tag>` exists (a minute at most): a test kills its worker meanwhile."""
    _ran(tag)
    deadline = time.monotonic() + 60
    while not _record().exists(f"matrix:go:{tag}") and time.monotonic() < deadline:
        time.sleep(0.02)
