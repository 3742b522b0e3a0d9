"""The counters of jobs that end unrun (expired, cancelled), written and read back against a real Redis."""

from __future__ import annotations

import datetime as dt

import pytest
import redis

from cogworker.ops import stats
from cogworker.store import keys, outcomes


def test_each_outcome_is_counted_in_total_and_today_and_read_back_by_the_totals(r: redis.Redis) -> None:
    assert outcomes.record(r, "expired", "j1")
    assert outcomes.record(r, "expired", "j2", count=2)
    assert outcomes.record(r, "cancelled", "j3")
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    assert r.ttl(keys.stat_day("expired", day)) > 0  # per-day counters expire like processed/failed's
    totals = stats.totals(r)
    assert totals.ended == {"expired": (3, 3), "cancelled": (1, 1), "limited": (0, 0)}


def test_a_wrong_type_counter_is_not_raised_but_logged_and_handed_to_the_key_guard(r: redis.Redis) -> None:
    r.rpush(keys.stat("cancelled"), "not a counter")
    assert outcomes.record(r, "cancelled", "j1") is False
    assert r.sismember(keys.GUARD_REQUESTS, keys.stat("cancelled"))
    assert r.lrange(keys.stat("cancelled"), 0, -1) == ["not a counter"]  # nothing was removed


def test_an_outcome_that_is_not_counted_here_is_a_programming_error(r: redis.Redis) -> None:
    with pytest.raises(ValueError, match="not an outcome"):
        outcomes.record(r, "processed", "j1")
