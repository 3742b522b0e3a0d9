"""Counting the jobs that end without running to a result of their own (`keys.ENDED_UNRUN`: expired,
cancelled): a total and a per-UTC-day counter for each, as processed and failed have.

The job itself is settled by the caller (acknowledged, so it is off the in-progress list for good);
this only counts it. A count that can't be written (Redis failing at that moment, or a counter key
of the wrong type) is logged with the job's jid and outcome, so the end is never silent, and never
raised: counting must not turn an ended job into a failed one.
"""

from __future__ import annotations

import datetime as dt

import redis
import structlog

from cogworker.store import key_guard, keys, shards

log = structlog.get_logger("cogworker.outcomes")

DAY_COUNTER_TTL_S = 60 * 60 * 24 * 365


def record(
    client: redis.Redis, outcome: str, jid: str, partition: shards.Partition | None = None, count: int = 1
) -> bool:
    """Count `count` jobs as having ended with `outcome`. True when the counters were written.
    `partition`: in the sharded layout, the job's queue partition, whose counters these are (`client`
    is then that partition's: store/shard_clients.py); the readers sum every partition's."""
    if outcome not in keys.ENDED_UNRUN:
        raise ValueError(f"not an outcome counted here: {outcome!r}")
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    if partition is not None and shards.is_sharded():
        counters = (shards.stat(partition, outcome), shards.stat_day(partition, outcome, day))
    else:
        counters = (keys.stat(outcome), keys.stat_day(outcome, day))
    pipe = client.pipeline(transaction=False)
    for key in counters:
        pipe.incrby(key, count)
    pipe.expire(counters[1], DAY_COUNTER_TTL_S)
    try:
        replies = pipe.execute(raise_on_error=False)
    except Exception as exc:
        log.error("outcome_not_counted", outcome=outcome, jid=jid, error=f"{type(exc).__name__}: {exc}")
        return False
    wrong = [key for key, reply in zip(counters, replies, strict=False) if isinstance(reply, Exception)]
    if wrong:
        log.error("outcome_not_counted", outcome=outcome, jid=jid, keys=wrong, note="the key guard is asked")
        key_guard.request(client, *wrong)
        return False
    return True
