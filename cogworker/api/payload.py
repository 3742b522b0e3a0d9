"""Job payloads: the JSON-native argument check and building the dict that goes to Redis."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

from cogworker import codec
from cogworker.api import sidekiq_payload
from cogworker.store import keys

# The queue a job goes to, and the retries it gets, when its options don't say.
DEFAULT_QUEUE = "default"
DEFAULT_RETRIES = 25
ERROR_MESSAGE_CHARS = 10_000

_NATIVE_SCALARS = (str, int, float, bool, type(None))


# How deep one argument may nest: orjson writes a payload at most 254 levels deep (it reads 1,024),
# and the payload object and its args list are two of those levels.
MAX_ARG_DEPTH = 252


def check_json_native(value: Any, path: str, depth: int = 1) -> None:
    """Raise TypeError naming the path of the first value that JSON would not round-trip."""
    if isinstance(value, _NATIVE_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise TypeError(f"{path}: {value!r} is not JSON-native (NaN and infinity are not JSON)")
        if isinstance(value, str) and not codec.is_utf8(value):
            raise TypeError(f"{path}: a string with a lone surrogate is not valid UTF-8, so not JSON")
        return
    if isinstance(value, list | dict) and depth > MAX_ARG_DEPTH:
        raise TypeError(
            f"{path}: nested more than {MAX_ARG_DEPTH} levels deep, deeper than a payload is written"
        )
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json_native(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is {type(key).__name__}, JSON object keys must be str")
            if not codec.is_utf8(key):
                raise TypeError(f"{path}: key {codec.escape(key)!r} has a lone surrogate, so is not JSON")
            check_json_native(item, f"{path}[{key!r}]", depth + 1)
        return
    raise TypeError(f"{path}: {type(value).__name__} is not JSON-native")


def check_arguments(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> None:
    for i, arg in enumerate(args):
        check_json_native(arg, f"args[{i}]")
    for name, arg in kwargs.items():
        check_json_native(arg, f"kwargs[{name!r}]")


def new_jid() -> str:
    """24 hex digits from the OS's random source (what secrets.token_hex(12) returns, minus two
    calls of wrapping: push_bulk makes one per job)."""
    return os.urandom(12).hex()


def build(
    name: str,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    *,
    queue: str,
    retry: bool | int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    check_arguments(args, kwargs)
    now = time.time()
    # The jid before the arguments: an acknowledgement's LREM compares the payload with each entry of
    # the in-progress list, and two payloads of one job class differ from their jid on (the payload
    # curve: with the arguments first, each comparison of 1 MB payloads read the whole megabyte).
    job: dict[str, Any] = {
        "class": name,
        "jid": new_jid(),
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue": queue,
        "created_at": now,
        "retry": retry,
    }
    if extra:
        job.update(extra)
    return job


def stored(job: dict[str, Any]) -> bytes:
    """A job due now as its queue stores it: the JSON bytes, sent as they are (no text copy of a big
    payload). An empty `kwargs` is left out, as Sidekiq's payloads have none: every reader takes a
    missing `kwargs` for `{}` (the worker gives server middleware the job with it put back). The
    job dict keeps it."""
    if job.get("kwargs") == {}:
        return codec.dumps_bytes({key: value for key, value in job.items() if key != "kwargs"})
    return codec.dumps_bytes(job)


def scheduled_text(job: dict[str, Any]) -> bytes:
    """A job due later as the schedule set stores it: as `stored`, and without `at`, as Sidekiq's
    client stores it (the entry's score is the time). Client middleware has seen `at` by then; the
    dict keeps it."""
    return stored({key: value for key, value in job.items() if key != "at"})


# Counts past this are treated as this: a retry's delay grows as count**4, and a larger count would
# overflow the float its due time is.
MAX_COUNT = 10**9


def retry_limit(job: dict[str, Any], default: int) -> int:
    """How many retries this job may have: `retry=False` is none, True the default, N is N.
    Anything else (a payload not written by cogworker) is none: `odd_retry` says so."""
    retry = job.get("retry", True)
    if retry is True:
        return default
    if isinstance(retry, bool) or not isinstance(retry, int):
        return 0
    return min(max(retry, 0), MAX_COUNT)


def sidekiq_limit(job: dict[str, Any], options: Mapping[str, Any] | None) -> int:
    """How many retries the job has in the Sidekiq mode: its `retry`, where true (or missing) is the
    job's own option when it declares one, else Sidekiq's 25 (api/sidekiq_payload.py)."""
    return retry_limit(
        {"retry": sidekiq_payload.effective_retry(job, options)}, sidekiq_payload.SIDEKIQ_RETRIES
    )


def odd_retry(job: dict[str, Any]) -> bool:
    """`retry` is there but is neither true/false nor a whole number."""
    retry = job.get("retry", True)
    return not isinstance(retry, bool | int)


def retry_count(job: dict[str, Any]) -> int | None:
    """The job's `retry_count` (how many retries it has had, minus one), or None when it has none
    or holds something that isn't a count (a payload not written by cogworker: null, "abc", [1]).
    Never raises: a job whose filing raised would never be filed at all."""
    value: Any = job.get("retry_count")
    if isinstance(value, bool):
        return None
    whole_float = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    digits = isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20
    if whole_float or digits:
        value = int(value)
    if not isinstance(value, int) or value < 0:
        return None
    return min(value, MAX_COUNT)


def terminal_failure(job: dict[str, Any], default_retries: int) -> bool:
    """Would failing now send this job to dead (rather than to retry)? In the Sidekiq mode, dead or
    discarded, with `retry: true` read as the job's own option (api/sidekiq_payload.py)."""
    if keys.SIDEKIQ:
        options = sidekiq_payload.registered_options(job)
        if sidekiq_payload.effective_retry(job, options) is False:
            return True
        if sidekiq_payload.retry_for_passed(job, time.time()):
            return True
        default_retries = sidekiq_limit(job, options)
        job = {**job, "retry": True}
    count = retry_count(job)
    return (count + 1 if count is not None else 0) >= retry_limit(job, default_retries)


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The error's class and message as text JSON can hold, even for an exception whose str()
    raises or holds lone surrogates."""
    try:
        message = str(exc)
    except Exception as failure:
        message = f"<the exception's message could not be read: {type(failure).__name__}>"
    kind = type(exc)
    return {
        "error_class": codec.escape(f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")),
        "error_message": codec.escape(message[:ERROR_MESSAGE_CHARS]),
    }
