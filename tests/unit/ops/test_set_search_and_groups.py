"""The sets' time-budgeted reads against a real Redis, with an injected clock: a search
(ops/set_search.py) that stops between slices when its budget is spent (always reading one, so it
moves on) and whose raw-text pre-check never hides a match, and the grouping of ops/set_groups.py
(counts, newest message, first and last failure, the cap on distinct groups)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from cogworker import codec
from cogworker.ops import set_groups, set_search
from cogworker.ops import sets as set_ops
from tests.support.set_entries import add, dead_job

DEAD = "cogworker:dead"


def ticking(step: float) -> Callable[[], float]:
    """A clock that moves `step` seconds each time it is read."""
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


def fill(r: redis.Redis, count: int, **fields: object) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        pipe.zadd(DEAD, {codec.dumps(dead_job(f"j{i}", **fields)): 1000.0 + i})
    pipe.execute()


def test_search_stops_between_slices_when_its_time_is_spent(r: redis.Redis) -> None:
    fill(r, 2_200)
    match = set_ops.Filter(job="nothing")
    # The deadline is read at the start (t=1, deadline 3.5), then before each slice after the first.
    result = set_search.search(r, "dead", match, budget_s=2.5, clock=ticking(1.0))
    assert (result.end, result.out_of_time, result.finished) == (3 * set_ops.BATCH, True, False)
    rest = set_search.search(r, "dead", match, start=result.end, budget_s=0.0, clock=ticking(1.0))
    assert (rest.start, rest.end, rest.out_of_time) == (1_500, 2_000, True)  # one slice, always
    done = set_search.search(r, "dead", match, start=rest.end, budget_s=60.0)
    assert (done.end, done.out_of_time, done.finished) == (2_200, False, True)


def test_a_full_page_is_not_out_of_time(r: redis.Redis) -> None:
    fill(r, 1_200)
    result = set_search.search(
        r, "dead", set_ops.Filter(job="boom"), limit=25, budget_s=0.0, clock=ticking(1.0)
    )
    assert len(result.found) == 25 and result.end == 25 and not result.out_of_time


def test_groups_count_and_order_by_size(r: redis.Redis) -> None:
    for i in range(3):
        add(r, DEAD, dead_job(f"a{i}", failed_at=10.0 + i, died_at=20.0 + i, error_message=f"m{i}"), 1.0 + i)
    add(r, DEAD, dead_job("b", error_class="KeyError", failed_at=5.0, died_at=50.0), 9.0)
    add(r, DEAD, "not json at all", 10.0)
    grouping = set_groups.groups(r, "dead")
    assert grouping.complete and grouping.scanned == grouping.total == 5
    first, second, third = grouping.groups
    assert (first.job, first.error_class, first.count) == ("demo_jobs.boom", "ValueError", 3)
    assert (first.first_failed_at, first.last_failed_at, first.newest_message) == (10.0, 22.0, "m2")
    assert (second.error_class, second.count, second.last_failed_at) == ("KeyError", 1, 50.0)
    assert (third.job, third.error_class, third.actionable) == (None, None, False)


def test_a_partial_count_says_how_far_it_got(r: redis.Redis) -> None:
    fill(r, 1_200)
    grouping = set_groups.groups(r, "dead", budget_s=0.0, clock=ticking(1.0))
    assert (grouping.scanned, grouping.total, grouping.complete) == (set_ops.BATCH, 1_200, False)
    assert grouping.groups[0].count == set_ops.BATCH


def test_distinct_groups_are_capped(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(set_groups, "MAX_GROUPS", 3)
    for i in range(6):
        add(r, DEAD, dead_job(f"e{i}", error_class=f"Error{i}"), float(i))
    add(r, DEAD, dead_job("again", error_class="Error0"), 10.0)
    grouping = set_groups.groups(r, "dead")
    assert [g.error_class for g in grouping.groups] == ["Error0", "Error1", "Error2"]
    assert grouping.groups[0].count == 2 and grouping.others == 3


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        (set_ops.Filter(job="Report"), ["r"]),
        (set_ops.Filter(error="x y"), ["a"]),  # inside the message
        (set_ops.Filter(error=" x"), ["a", "r"]),  # spans ": " into the message: decoded, not pre-checked
        (set_ops.Filter(error="ValueError: x"), ["a"]),
        (set_ops.Filter(error="caf\u00e9"), ["u"]),  # stored escaped by another writer
        (set_ops.Filter(args="1, 2"), []),  # args are matched as written again, compactly
        (set_ops.Filter(args="1,2"), ["s"]),
        (set_ops.Filter(job_class="app.ReportJob", error_class="KeyError"), ["r"]),
    ],
)
def test_the_raw_text_pre_check_never_hides_a_match(
    r: redis.Redis, match: set_ops.Filter, expected: list[str]
) -> None:
    add(r, DEAD, dead_job("a", error_message="x y"), 1.0)
    add(r, DEAD, dead_job("r", **{"class": "app.ReportJob"}, error_class="KeyError"), 2.0)
    add(r, DEAD, '{"class":"x","jid":"u","queue":"q","error_class":"E","error_message":"caf\\u00e9"}', 3.0)
    add(r, DEAD, '{"class": "x", "jid": "s", "queue": "q", "args": [1, 2]}', 4.0)
    assert sorted(e.jid or "" for e in set_search.search(r, "dead", match).found) == expected
    entries = [set_ops.parse_entry("dead", raw, s) for raw, s in r.zrange(DEAD, 0, -1, withscores=True)]
    assert sorted(e.jid or "" for e in entries if match(e)) == expected  # the same as without it
    assert sorted(e.jid or "" for e in set_ops.entries(r, "dead", match)) == expected  # bulk actions
