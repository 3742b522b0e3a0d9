"""Reading a payload's times (`created_at`, `enqueued_at`, `failed_at`, `retried_at`) in either unit.

cogworker and Sidekiq 6 and 7 write them as float epoch seconds; Sidekiq 8 writes integer epoch
milliseconds. A value above `MS_ABOVE` can only be milliseconds: as seconds it would be a date past
the year 5000, while as milliseconds it is any date after March 1973. Readers go through `epoch_s`
so a Sidekiq 8 payload is never read as a time a thousand times too far (a latency of decades, a job
that looks years old).
"""

from __future__ import annotations

import math
from typing import Any

MS_ABOVE = 1e11


def epoch_s(value: Any) -> float | None:
    """`value` as epoch seconds: a number in seconds as it is, one in milliseconds divided by 1,000;
    None for anything that is no time (missing, a bool, text, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value / 1000.0 if value > MS_ABOVE else float(value)


def field_s(job: dict[str, Any], name: str) -> float | None:
    """The payload's time `name` in epoch seconds (None when it has none)."""
    return epoch_s(job.get(name))
