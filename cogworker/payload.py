"""Job payloads: the JSON-native argument check and building the dict that goes to Redis."""

from __future__ import annotations

import math
import os
import time
from typing import Any

_NATIVE_SCALARS = (str, int, float, bool, type(None))


def check_json_native(value: Any, path: str) -> None:
    """Raise TypeError naming the path of the first value that JSON would not round-trip."""
    if isinstance(value, _NATIVE_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise TypeError(f"{path}: {value!r} is not JSON-native (NaN and infinity are not JSON)")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json_native(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is {type(key).__name__}, JSON object keys must be str")
            check_json_native(item, f"{path}[{key!r}]")
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
    job: dict[str, Any] = {
        "class": name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "jid": new_jid(),
        "queue": queue,
        "created_at": now,
        "retry": retry,
    }
    if extra:
        job.update(extra)
    return job


def retry_limit(job: dict[str, Any], default: int) -> int:
    """How many retries this job may have: `retry=False` is none, True the default, N is N."""
    retry = job.get("retry", True)
    if retry is True:
        return default
    if retry is False or not isinstance(retry, int):
        return 0
    return max(retry, 0)


def terminal_failure(job: dict[str, Any], default_retries: int) -> bool:
    """Would failing now send this job to dead (rather than to retry)?"""
    return int(job.get("retry_count", -1)) + 1 >= retry_limit(job, default_retries)
