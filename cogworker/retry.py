"""What happens to a job that raised: the retry set with a backoff, or the dead set."""

from __future__ import annotations

import random
import time
import traceback
from dataclasses import dataclass
from typing import Any

from cogworker import keys
from cogworker.jobs import DEFAULT_RETRIES
from cogworker.payload import retry_limit

BACKTRACE_LINES = 20


def backoff_s(count: int, rng: random.Random | None = None) -> float:
    """Sidekiq's curve: count**4 + 15 + rand(10) * (count + 1) seconds (count starts at 0)."""
    jitter = (rng or random).randrange(10)
    return count**4 + 15 + jitter * (count + 1)


@dataclass(frozen=True, slots=True)
class Filing:
    """Where a finished-with-failure job goes: a sorted set, its score, the payload to store."""

    set_key: str
    score: float
    payload: dict[str, Any]

    @property
    def dead(self) -> bool:
        return self.set_key == keys.DEAD


def error_fields(exc: BaseException) -> dict[str, Any]:
    message = str(exc)
    return {
        "error_class": f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
        "error_message": message[:10_000],
    }


def backtrace(exc: BaseException) -> list[str]:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines).splitlines()[-BACKTRACE_LINES:]


def on_failure(job: dict[str, Any], exc: BaseException, now: float | None = None) -> Filing:
    """The next retry, or dead when the job is out of retries (or retry=False)."""
    now = time.time() if now is None else now
    failed = dict(job)
    failed.update(error_fields(exc))
    failed["backtrace"] = backtrace(exc)
    count = int(job["retry_count"]) + 1 if "retry_count" in job else 0
    if "failed_at" in job:
        failed["retried_at"] = now
    else:
        failed["failed_at"] = now
    limit = retry_limit(job, DEFAULT_RETRIES)
    if count < limit:
        failed["retry_count"] = count
        return Filing(keys.RETRY, now + backoff_s(count), failed)
    if "retry_count" in job or limit > 0:
        failed["retry_count"] = count
    failed["died_at"] = now
    return Filing(keys.DEAD, now, failed)


def unreadable(raw: str, queue: str | None, reason: str, now: float | None = None) -> Filing:
    """A payload that isn't a job at all: straight to dead, wrapped so nothing of it is lost."""
    now = time.time() if now is None else now
    return Filing(
        keys.DEAD,
        now,
        {
            "class": "cogworker.UnreadablePayload",
            "jid": "",
            "queue": queue,
            "raw": raw,
            "error_class": "cogworker.UnreadablePayload",
            "error_message": reason,
            "failed_at": now,
            "died_at": now,
            "retry": False,
        },
    )
