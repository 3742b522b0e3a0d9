"""What happens to a job that raised: the retry set with a backoff, or the dead set.

Filing must work whatever the payload holds and whatever the job raised: a failure whose filing
raised would leave the job in progress, never filed, to run again at every restart. So every field
is read defensively (an odd one is noted in `cogworker_notes`, never raised on), and a payload JSON
can't hold is stored sanitised (`storable`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cogworker import codec
from cogworker.api import backtrace, retry_filters, sidekiq_payload
from cogworker.api.payload import (
    DEFAULT_RETRIES,
    error_fields,
    odd_retry,
    retry_count,
    retry_limit,
    sidekiq_limit,
)
from cogworker.store import keys


def _check_retry(value: Any) -> None:
    if value is not None and not isinstance(value, bool) and (not isinstance(value, int) or value < 0):
        raise TypeError(f"retry must be True, False or a number of retries >= 0, not {value!r}")


def _check_backtrace(value: Any) -> None:
    # Sidekiq's retry code reads the option as true or a line count (`to_i`): a list or a mapping
    # crashes it and loses the job (backtrace.py).
    if value is not None and not isinstance(value, bool) and (not isinstance(value, int) or value < 0):
        raise TypeError(f"backtrace must be True, False or a number of lines >= 0, not {value!r}")


# The job options filing reads from a payload, each with the check `@job(...)` runs on it.
# `backtrace` is Sidekiq's option (true, or how many lines to keep), kept as given for a job that
# Sidekiq may run too: filing stores the exception chain, capped, under `error_backtrace` either
# way (backtrace.py says what is kept and what is cut).
OPTIONS: dict[str, Callable[[Any], None] | None] = {"retry": _check_retry, "backtrace": _check_backtrace}
NOTES = "cogworker_notes"
# The fields a filing writes itself: sanitising only these leaves the job as it was, still retryable.
OWN_FIELDS = frozenset(
    {
        "error_class",
        "error_message",
        backtrace.FIELD,
        NOTES,
        "failed_at",
        "retried_at",
        "died_at",
        "retry_count",
    }
)


MAX_JITTER = 9


def backoff_s(count: int, rng: random.Random | None = None) -> float:
    """Sidekiq's curve: count**4 + 15 + rand(10) * (count + 1) seconds (count starts at 0)."""
    return _curve(count, (rng or random).randint(0, MAX_JITTER))


def longest_backoff_s(count: int) -> float:
    """The longest `backoff_s(count)` can be: the curve at its largest jitter."""
    return float(_curve(count, MAX_JITTER))


def _curve(count: int, jitter: int) -> int:
    return count**4 + 15 + jitter * (count + 1)


@dataclass(frozen=True, slots=True)
class Filing:
    """Where a finished-with-failure job goes: a sorted set, its score, the payload to store, and
    (once `storable` made it) the payload's JSON text."""

    set_key: str
    score: float
    payload: dict[str, Any]
    text: str | None = None

    @property
    def dead(self) -> bool:
        """The job's end: filed in dead, or discarded (the Sidekiq mode, api/sidekiq_payload.py),
        which every reader of a filing treats alike (death notice, locks, batch, status)."""
        return self.set_key == keys.DEAD or (keys.SIDEKIQ != "" and self.discarded)

    @property
    def discarded(self) -> bool:
        return bool(keys.SIDEKIQ) and self.set_key == sidekiq_payload.discarded_key()


def odd_fields(job: dict[str, Any]) -> list[str]:
    """What in the payload filing had to read around (it is counted or limited as noted)."""
    notes = []
    if "retry_count" in job and retry_count(job) is None:
        notes.append(f"retry_count {_shown(job['retry_count'])} is not a count: counted from 0")
    if odd_retry(job):
        notes.append(f"retry {_shown(job['retry'])} is not true, false or a number: no retries")
    return notes


def _shown(value: Any) -> str:
    return codec.escape(codec.dumps_lenient(value)[0][:200])


def on_failure(
    job: dict[str, Any],
    exc: BaseException,
    now: float | None = None,
    options: Mapping[str, Any] | None = None,
) -> Filing:
    """The next retry, or dead when the job is out of retries (or retry=False). `options`: the
    registered job's, for its retry filters (retry_filters.py), which never travel in the payload."""
    now = time.time() if now is None else now
    failed = dict(job)
    failed.update(error_fields(exc))
    backtrace.record(failed, exc)
    notes = odd_fields(job)
    refused = retry_filters.not_retried(options, exc)
    if refused is not None:
        notes.append(refused)
    if notes:
        earlier = job.get(NOTES)
        failed[NOTES] = [*(earlier if isinstance(earlier, list) else []), *notes]
    previous = retry_count(job)
    count = previous + 1 if previous is not None else 0
    if "failed_at" in job:
        failed["retried_at"] = now
    else:
        failed["failed_at"] = now
    sidekiq = bool(keys.SIDEKIQ)
    limit = sidekiq_limit(job, options) if sidekiq else retry_limit(job, DEFAULT_RETRIES)
    if sidekiq and sidekiq_payload.retry_for_passed(job, now):
        limit = min(limit, count)  # out of retries, as by count
    discarded = sidekiq and sidekiq_payload.discards(job, options, count >= limit or refused is not None)
    if count < limit and refused is None and not discarded:
        failed["retry_count"] = count
        return Filing(keys.RETRY, now + retry_filters.delay_s(options, count, exc, backoff_s), failed)
    if "retry_count" in job or limit > 0:
        failed["retry_count"] = count
    failed["died_at"] = now
    if discarded:
        return Filing(sidekiq_payload.discarded_key(), now, failed)
    return Filing(keys.DEAD, now, failed)


def will_retry(job: dict[str, Any], exc: BaseException, options: Mapping[str, Any] | None = None) -> bool:
    """Whether `on_failure` would file this failure in retry (not dead): for integrations that
    report a failure before it is filed (cogworker.contrib). The same count, limit and filters."""
    previous = retry_count(job)
    count = previous + 1 if previous is not None else 0
    if keys.SIDEKIQ:
        limit = sidekiq_limit(job, options)
        if sidekiq_payload.effective_retry(job, options) is False:
            return False
        if sidekiq_payload.retry_for_passed(job, time.time()):
            return False
    else:
        limit = retry_limit(job, DEFAULT_RETRIES)
    return count < limit and retry_filters.not_retried(options, exc) is None


def unreadable(raw: str, queue: str | None, reason: str, now: float | None = None) -> Filing:
    """A payload that isn't a job at all: straight to dead, wrapped so nothing of it is lost (bytes
    that aren't UTF-8 are kept escaped under `raw` and exactly under `raw_base64`)."""
    now = time.time() if now is None else now
    return Filing(
        keys.DEAD,
        now,
        {
            "class": "cogworker.UnreadablePayload",
            "jid": "",
            "queue": codec.escape(queue) if queue is not None else None,
            **codec.raw_fields(raw),
            "error_class": "cogworker.UnreadablePayload",
            "error_message": reason,
            "failed_at": now,
            "died_at": now,
            "retry": False,
        },
    )


def unreadable_reason(raw: str) -> str:
    """Why a payload that isn't a job can't be read, for its dead entry."""
    if not codec.is_utf8(raw):
        return "payload is not valid UTF-8"
    return "payload is not a JSON object with a job class"


def storable(filing: Filing, raw: str | None = None, now: float | None = None) -> Filing:
    """The filing with its payload's JSON `text`, made before anything is sent to Redis: an error
    here is the data's, never Redis's. A payload orjson can't write (a lone surrogate, nesting past
    254 levels) is sanitised (codec.sanitise) and what changed is noted. When the job's own data
    changed, a retry would not run the same job: it goes to dead, its original payload kept under
    `raw`."""
    if filing.text is not None:
        return filing
    try:
        return replace(filing, text=codec.dumps(filing.payload))
    except codec.EncodeError:
        pass
    notes: list[str] = []
    payload: dict[str, Any] = {}
    job_changed = False
    for key, value in filing.payload.items():
        name = codec.escape(str(key))
        before = len(notes)
        payload[name] = codec.sanitise(value, notes, name)
        job_changed = job_changed or (len(notes) > before and name not in OWN_FIELDS)
    existing = payload.get(NOTES)
    payload[NOTES] = [*(existing if isinstance(existing, list) else []), *notes]
    if job_changed:
        if raw is not None:
            payload.update(codec.raw_fields(raw))
        if not filing.dead:
            now = time.time() if now is None else now
            payload["died_at"] = now
            payload[NOTES].append("filed in dead, not retry: a retry would not run the same job")
            filing = replace(filing, set_key=keys.DEAD, score=now)
    return replace(filing, payload=payload, text=codec.dumps(payload))


def encoded(filing: Filing, raw: str | None = None) -> tuple[Filing, str]:
    """`storable`, and the JSON text it made."""
    ready = storable(filing, raw)
    return ready, ready.text if ready.text is not None else codec.dumps(ready.payload)
