"""The job counters: processed/failed (and the jobs that ended unrun: expired, cancelled) in total and
today, the processed/failed per-day history, and Redis's own vitals.

The per-day counters (`cogworker:stat:processed:<YYYY-MM-DD>`, UTC days) are written by every ack
and every failure filing; a history of N days is one MGET per counter, whatever the traffic.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import redis

from cogworker.store import keys

MIN_DAYS = 7
MAX_DAYS = 180


@dataclass(frozen=True, slots=True)
class Totals:
    processed: int
    failed: int
    processed_today: int
    failed_today: int
    # keys.COUNTED_OUTCOMES (the jobs that ended unrun, and those a limiter put back) -> (total, today)
    ended: dict[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Day:
    day: str  # YYYY-MM-DD, UTC
    processed: int
    failed: int


@dataclass(frozen=True, slots=True)
class RedisVitals:
    version: str
    used_memory_human: str
    used_memory_peak_human: str
    connected_clients: int
    uptime_days: int
    mode: str


def _count(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0  # a counter someone overwrote with text counts as nothing, not as a page that fails


def today(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d")


def totals(client: redis.Redis, now: dt.datetime | None = None) -> Totals:
    day = today(now)
    ended = keys.COUNTED_OUTCOMES
    values = [
        _count(v)
        for v in client.mget(
            keys.STAT_PROCESSED,
            keys.STAT_FAILED,
            keys.stat_processed_day(day),
            keys.stat_failed_day(day),
            *(keys.stat(outcome) for outcome in ended),
            *(keys.stat_day(outcome, day) for outcome in ended),
        )
    ]
    pairs = zip(values[4 : 4 + len(ended)], values[4 + len(ended) :], strict=True)
    return Totals(
        processed=values[0],
        failed=values[1],
        processed_today=values[2],
        failed_today=values[3],
        ended=dict(zip(ended, pairs, strict=True)),
    )


def clamp_days(days: Any) -> int:
    """A history length from a query string: a number of days within [MIN_DAYS, MAX_DAYS]."""
    try:
        wanted = int(days)
    except (TypeError, ValueError):
        return 30
    return min(MAX_DAYS, max(MIN_DAYS, wanted))


def history(client: redis.Redis, days: int, now: dt.datetime | None = None) -> list[Day]:
    """The last `days` UTC days, oldest first, today included."""
    days = clamp_days(days)
    end = (now or dt.datetime.now(dt.UTC)).date()
    names = [(end - dt.timedelta(days=back)).isoformat() for back in range(days - 1, -1, -1)]
    pipe = client.pipeline(transaction=False)
    pipe.mget([keys.stat_processed_day(d) for d in names])
    pipe.mget([keys.stat_failed_day(d) for d in names])
    processed, failed = pipe.execute()
    return [Day(d, _count(p), _count(f)) for d, p, f in zip(names, processed, failed, strict=True)]


def redis_vitals(client: redis.Redis) -> RedisVitals:
    info: dict[str, Any] = client.info()
    return RedisVitals(
        version=str(info.get("redis_version", "?")),
        used_memory_human=str(info.get("used_memory_human", "?")),
        used_memory_peak_human=str(info.get("used_memory_peak_human", "?")),
        connected_clients=_count(info.get("connected_clients")),
        uptime_days=_count(info.get("uptime_in_days")),
        mode=str(info.get("redis_mode", "standalone")),
    )
