"""The sets' bounded reads for the Web UI against a real Redis: entry keys, a lookup by exact score,
a page slice, a budgeted search, and the actions taking a score instead of scanning."""

from __future__ import annotations

import pytest
import redis

from cogworker import codec
from cogworker.ops import NotFound, set_actions, set_search
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings
from cogworker.store.scripts import Scripts
from tests.support.set_entries import add, dead_job

DEAD = "cogworker:dead"


def _fill(r: redis.Redis, count: int, **fields: object) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.zadd(DEAD, {codec.dumps(dead_job(f"j{i}", **fields)): 1000.0 + i})
    pipe.execute()


@pytest.mark.parametrize("score", [1764553662.123456, 1e-05, 5.0, 1e22])
def test_entry_key_round_trips_even_with_an_exponent_or_dashes_in_the_ref(score: float) -> None:
    key = set_ops.entry_key(score, "raw-ab-cd")
    assert set_ops.parse_key(key) == (score, "raw-ab-cd")


def test_parse_key_refuses_what_is_not_a_key() -> None:
    assert set_ops.parse_key("nonsense") is None
    assert set_ops.parse_key("12.5") is None
    assert set_ops.parse_key("-jid") is None


def test_at_score_finds_the_entry_among_those_sharing_its_score(r: redis.Redis) -> None:
    for i in range(set_ops.BATCH + 3):  # more than one slice share the score
        add(r, DEAD, dead_job(f"same{i}"), score=42.5)
    add(r, DEAD, dead_job("other"), score=43.0)
    entry = set_ops.at_score(r, "dead", 42.5, f"same{set_ops.BATCH + 2}")
    assert entry is not None and entry.jid == f"same{set_ops.BATCH + 2}"
    assert set_ops.at_score(r, "dead", 42.5, "other") is None
    assert set_ops.get(r, "dead", "other", 43.0).key == "43.0-other"
    with pytest.raises(NotFound):
        set_ops.get(r, "dead", "other", 42.5)


def test_page_is_one_slice_in_either_order(r: redis.Redis) -> None:
    _fill(r, 10)
    assert [e.jid for e in set_ops.page(r, "dead", 0, 3)] == ["j9", "j8", "j7"]
    assert [e.jid for e in set_ops.page(r, "dead", 3, 2, desc=False)] == ["j3", "j4"]
    assert set_ops.page(r, "dead", 20, 5) == []


def test_search_stops_at_its_budget_and_says_where_to_go_on(r: redis.Redis) -> None:
    _fill(r, 1200)
    match = set_ops.Filter(job="nothing-matches")
    first = set_search.search(r, "dead", match, start=0, budget=700, limit=25)
    assert (first.found, first.start, first.end, first.total, first.finished) == ([], 0, 700, 1200, False)
    rest = set_search.search(r, "dead", match, start=first.end, budget=700, limit=25)
    assert (rest.start, rest.end, rest.finished) == (700, 1200, True)


def test_search_stops_at_its_limit_right_after_the_last_match(r: redis.Redis) -> None:
    _fill(r, 100)
    result = set_search.search(r, "dead", set_ops.Filter(args="x"), start=10, budget=2000, limit=5)
    assert [e.jid for e in result.found] == ["j89", "j88", "j87", "j86", "j85"]
    assert (result.start, result.end) == (10, 15)


def test_the_args_filter_matches_the_json_of_args_and_kwargs(r: redis.Redis) -> None:
    add(r, DEAD, dead_job("a", args=[{"user": 17}], kwargs={}), score=1)
    add(r, DEAD, dead_job("b", args=[], kwargs={"report": "weekly"}), score=2)
    assert [e.jid for e in set_ops.entries(r, "dead", set_ops.Filter(args='"user":17'))] == ["a"]
    assert [e.jid for e in set_ops.entries(r, "dead", set_ops.Filter(args="weekly"))] == ["b"]
    assert not set_ops.Filter(args="x").empty


def test_actions_take_the_score_and_refuse_a_wrong_one(r: redis.Redis, settings: Settings) -> None:
    scripts = Scripts(r)
    add(r, DEAD, dead_job("d1"), score=10.0)
    with pytest.raises(NotFound):
        set_actions.retry_now(r, scripts, "dead", "d1", 11.0)
    assert set_actions.retry_now(r, scripts, "dead", "d1", 10.0).jid == "d1"
    assert r.llen("cogworker:queue:default") == 1
    with pytest.raises(NotFound):  # the second operator: already gone
        set_actions.retry_now(r, scripts, "dead", "d1", 10.0)
    add(r, DEAD, dead_job("d2"), score=20.0)
    assert set_actions.delete(r, "dead", "d2", 20.0).jid == "d2"
    assert r.zcard(DEAD) == 0
    add(r, "cogworker:retry", dead_job("r1"), score=30.0)
    assert set_actions.kill(r, scripts, settings, "retry", "r1", 30.0).jid == "r1"
    assert r.zcard("cogworker:retry") == 0 and r.zcard(DEAD) == 1
