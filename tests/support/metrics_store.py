"""Reading the per-class and per-queue minute hashes (cogworker/store/metrics_layout.py) the workers
write, summed over every minute, for tests that count what their jobs left there."""

from __future__ import annotations

import redis

from cogworker.store import keys


def summed(client: redis.Redis, kind: str) -> dict[str, int]:
    """Every field of every `metrics:<kind>:<minute>` hash (kind "j" or "q"), summed over the minutes
    (`lat_ms` is a maximum per minute: its sum means nothing, but its presence does)."""
    total: dict[str, int] = {}
    for key in client.scan_iter(match=f"{keys.PREFIX}metrics:{kind}:*", count=500):
        for name, value in client.hgetall(key).items():
            total[str(name)] = total.get(str(name), 0) + int(value)
    return total


def minute_keys(client: redis.Redis, kind: str) -> list[str]:
    return sorted(str(k) for k in client.scan_iter(match=f"{keys.PREFIX}metrics:{kind}:*", count=500))
