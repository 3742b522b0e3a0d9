"""Jobs and on_death hooks for the death-hook and retry-filter tests. The hooks record each call in
Redis (`test:deaths`, with the calling process's pid) so a test can count them."""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from cogworker import Death, job, on_death


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


@on_death
def broken_hook(job: dict[str, Any], death: Death) -> None:
    """Registered first: when it raises, the hook after it must still run."""
    if "hook-raises" in (job.get("args") or []):
        raise RuntimeError("the hook broke")


@on_death
def record_death(job: dict[str, Any], death: Death) -> None:
    _redis().rpush(
        "test:deaths",
        json.dumps(
            {
                "pid": os.getpid(),
                "jid": job.get("jid"),
                "class": job.get("class"),
                "raw": job.get("raw"),
                "cause": death.cause,
                "error_class": death.error_class,
                "error_message": death.error_message,
            }
        ),
    )


@job(retry=1)
def fails(tag: str) -> None:
    raise ValueError(tag)


@job(retry=False)
def fails_at_once(tag: str) -> None:
    raise RuntimeError(tag)


@job(retry=5, retry_on=(KeyError, ValueError), discard_on=(KeyError,))
def discarded(tag: str) -> None:
    raise KeyError(tag)


@job(retry=5, retry_on=(ConnectionError,))
def wrong_error(tag: str) -> None:
    raise ValueError(tag)


@job(retry=5, retry_on=ConnectionError)
def right_error(tag: str) -> None:
    raise ConnectionError(tag)


@job(retry=5, retry_in=lambda count, exc: 1000 + count)
def slow_retry(tag: str) -> None:
    raise ValueError(tag)


def _bad_delay(count: int, exc: BaseException) -> Any:
    return "soon"


@job(retry=5, retry_in=_bad_delay)
def bad_delay(tag: str) -> None:
    raise ValueError(tag)


def _raising_delay(count: int, exc: BaseException) -> float:
    raise ZeroDivisionError("no delay for you")


@job(retry=5, retry_in=_raising_delay)
def raising_delay(tag: str) -> None:
    raise ValueError(tag)


@job(retry=3)
def pill(tag: str) -> None:
    """Kills its own process: a poison pill."""
    _redis().rpush("test:started", f"{tag} {os.getpid()}")
    os.kill(os.getpid(), 9)
