"""The job counters: processed/failed (and the jobs that ended unrun: expired, cancelled) in total and
today, the processed/failed per-day history, and Redis's own vitals.

The per-day counters (`cogworker:stat:processed:<YYYY-MM-DD>`, UTC days) are written by every ack
and every failure filing; a history of N days is one MGET per counter, whatever the traffic.

In the sharded layout (store/shards.py) each queue partition keeps its own counters in its slot, written
by the scripts that move its jobs; a reading is the home slot's counters (anything counted outside a
partition) plus every partition's, the same MGETs sent to every partition at once (store/fanout.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from cogworker.store import fanout, keys, shards

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


def _total_keys(day: str, partition: shards.Partition | None) -> list[str]:
    """The counters `totals` reads, in its order: the home slot's (None) or a partition's."""
    names = ["processed", "failed"]
    ended = keys.COUNTED_OUTCOMES
    if partition is None:
        return [
            keys.STAT_PROCESSED,
            keys.STAT_FAILED,
            keys.stat_processed_day(day),
            keys.stat_failed_day(day),
            *(keys.stat(outcome) for outcome in ended),
            *(keys.stat_day(outcome, day) for outcome in ended),
        ]
    return [
        *(shards.stat(partition, name) for name in names),
        *(shards.stat_day(partition, name, day) for name in names),
        *(shards.stat(partition, outcome) for outcome in ended),
        *(shards.stat_day(partition, outcome, day) for outcome in ended),
    ]


def _summed(client: redis.Redis, key_lists: Callable[[shards.Partition | None], list[str]]) -> list[int]:
    """Each position's counter summed over the home slot and, in the sharded layout, every partition
    (one MGET per slot); outside it, the one MGET of the one-slot layout."""
    home = [_count(v) for v in client.mget(key_lists(None))]
    if not shards.is_sharded():
        return home
    replies = fanout.pipelined(
        client, fanout.known_partitions(client), lambda pipe, p: pipe.mget(key_lists(p))
    )
    for (values,) in replies.values():
        home = [a + _count(b) for a, b in zip(home, values, strict=True)]
    return home


def totals(client: redis.Redis, now: dt.datetime | None = None) -> Totals:
    day = today(now)
    ended = keys.COUNTED_OUTCOMES
    values = _summed(client, lambda p: _total_keys(day, p))
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
    if shards.is_sharded():
        # One MGET of both counters' days per slot, summed; split back into the two series.
        summed = _summed(
            client,
            lambda p: [
                *(_day_key(p, "processed", d) for d in names),
                *(_day_key(p, "failed", d) for d in names),
            ],
        )
        processed_n, failed_n = summed[: len(names)], summed[len(names) :]
        return [Day(d, p, f) for d, p, f in zip(names, processed_n, failed_n, strict=True)]
    pipe = client.pipeline(transaction=False)
    pipe.mget([keys.stat_processed_day(d) for d in names])
    pipe.mget([keys.stat_failed_day(d) for d in names])
    processed, failed = pipe.execute()
    return [Day(d, _count(p), _count(f)) for d, p, f in zip(names, processed, failed, strict=True)]


def _day_key(partition: shards.Partition | None, name: str, day: str) -> str:
    if partition is None:
        return keys.stat_processed_day(day) if name == "processed" else keys.stat_failed_day(day)
    return shards.stat_day(partition, name, day)


def job_set_sizes(client: redis.Redis) -> dict[str, int]:
    """Entries in the retry, scheduled and dead sets (keys.job_sets order); in the sharded layout the
    home slot's and every partition's summed (one ZCARD per set per slot, sent at once)."""
    names = list(keys.job_sets())
    pipe = client.pipeline(transaction=False)
    for key in keys.job_sets().values():
        pipe.zcard(key)
    sizes = [int(n) for n in pipe.execute()]
    if shards.is_sharded():
        found = fanout.pipelined(
            client,
            fanout.known_partitions(client),
            lambda pipe, p: [pipe.zcard(shards.job_sets(p)[name]) for name in names],
        )
        for replies in found.values():
            sizes = [a + int(b) for a, b in zip(sizes, replies, strict=True)]
    return dict(zip(names, sizes, strict=True))


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
