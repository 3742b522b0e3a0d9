"""When a pushed job is due: `perform_in`'s delay and `perform_at`'s time, checked the same way for the
sync push (api/pusher.py) and the awaitable one (api/aio_push.py)."""

from __future__ import annotations

import datetime as dt
import time


def at_epoch_s(when: dt.datetime | float) -> float:
    """perform_at's `when` as epoch seconds: an aware datetime or a number (a naive datetime would be
    read in whatever zone the pushing host is in, so it is refused)."""
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise TypeError("perform_at needs an aware datetime (with tzinfo) or an epoch number")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"perform_at takes a datetime or epoch seconds, not {type(when).__name__}")
    return float(when)


def in_epoch_s(seconds: float | dt.timedelta) -> float:
    """perform_in's delay as the epoch seconds it ends at."""
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"perform_in takes seconds or a timedelta, not {type(seconds).__name__}")
    return time.time() + float(seconds)
