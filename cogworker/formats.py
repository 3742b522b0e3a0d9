"""How durations and sizes read for people: one way, shared by the `cogworker` verbs and the Web UI
so the two show the same figure the same way."""

from __future__ import annotations

import math


def duration(seconds: float | None, missing: str = "-") -> str:
    """`850ms`, `4.2s`, `3m05s`, `2h10m`, `3d04h`; `missing` for None or a value that isn't finite."""
    if seconds is None or not math.isfinite(seconds):
        return missing
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def size_bytes(n: int) -> str:
    """`512 B`, `1.5 KB`, `26.3 MB`, `1.2 GB`."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} GB"
