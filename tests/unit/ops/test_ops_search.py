"""ops/search.py against the session's real Redis: jobs whose arguments or class hold a text, in a
queue and in the retry, scheduled and dead sets; a time budget that runs out and a cursor that goes
on from there until every place is read (nothing missed, nothing twice); a key of the wrong type."""

from __future__ import annotations

import itertools

import redis

from cogworker import codec
from cogworker.ops import locate
from cogworker.ops import search as search_ops
from cogworker.store import keys
from tests.support.set_entries import add, dead_job, job

# A budget no read here comes near on any machine: the tests of the budget pass their own clock.
PLENTY_S = 60.0


def push(r: redis.Redis, queue: str, payload: dict[str, object]) -> None:
    r.sadd(keys.QUEUES, queue)
    r.lpush(keys.queue(queue), codec.dumps(payload))


def test_args_and_class_are_found_in_every_place(r: redis.Redis) -> None:
    push(r, "mail", job("q1", args=["invoice-7731", 3]))
    push(r, "mail", job("q2", args=["other"]))
    add(r, keys.RETRY, dead_job("r1", args=[{"order": "invoice-7731"}]), 10.0)
    add(r, keys.SCHEDULE, job("s1", kwargs={"ref": "invoice-7731"}), 20.0)
    add(r, keys.DEAD, dead_job("d1", args=["invoice-7731"]), 30.0)
    add(r, keys.DEAD, dead_job("d2", args=["nothing"]), 31.0)
    found = search_ops.search(r, "invoice-7731", budget_s=PLENTY_S)
    assert {(m.place, m.jid) for m in found.matches} == {
        ("queue:mail", "q1"),
        ("retry", "r1"),
        ("scheduled", "s1"),
        ("dead", "d1"),
    }
    assert found.next is None and not found.out_of_time and found.read == 6
    queued = next(m for m in found.matches if m.place == "queue:mail")
    assert queued.queue == "mail" and queued.index == 1  # q2 was pushed after it
    dead = next(m for m in found.matches if m.place == "dead")
    assert dead.entry is not None and dead.entry.key.endswith("-d1")
    by_class = search_ops.search(r, "demo_jobs.boom", budget_s=PLENTY_S)
    assert {m.jid for m in by_class.matches} == {"r1", "d1", "d2"}
    assert search_ops.search(r, "no such text", budget_s=PLENTY_S).matches == []


def test_a_spent_budget_returns_a_cursor_that_goes_on_to_the_end(r: redis.Redis) -> None:
    for n in range(25):
        add(r, keys.DEAD, dead_job(f"d{n}", args=["needle" if n % 5 == 0 else "hay"]), float(n))
    for n in range(7):
        push(r, "low", job(f"q{n}", args=["needle" if n == 3 else "hay"]))
    ticks = itertools.count()
    # Each clock reading is a second later: the budget (0.5 s) is spent after every slice.
    found = search_ops.search(r, "needle", slice_size=4, budget_s=0.5, clock=lambda: float(next(ticks)))
    assert found.out_of_time and found.next is not None and found.read == 4
    seen = [m.jid for m in found.matches]
    rounds = 1
    while found.next is not None:
        found = search_ops.search(r, "needle", found.next, slice_size=4, budget_s=0.5, clock=lambda: 0.0)
        seen += [m.jid for m in found.matches]
        rounds += 1
    assert sorted(seen) == sorted(["d0", "d5", "d10", "d15", "d20", "q3"]) and rounds == 2


def test_a_full_page_stops_and_a_bad_cursor_restarts(r: redis.Redis) -> None:
    for n in range(5):
        add(r, keys.RETRY, dead_job(f"r{n}", args=["same"]), float(n))
    first = search_ops.search(r, "same", limit=3, budget_s=PLENTY_S)
    assert len(first.matches) == 3 and first.full and first.next == locate.Cursor("retry", 3)
    rest = search_ops.search(r, "same", first.next, limit=3, budget_s=PLENTY_S)
    assert len(rest.matches) == 2 and rest.next is None
    assert {m.jid for m in first.matches + rest.matches} == {f"r{n}" for n in range(5)}
    again = search_ops.search(r, "same", locate.Cursor("queue:gone", 7), budget_s=PLENTY_S)
    assert again.restarted and len(again.matches) == 5


def test_a_key_of_the_wrong_type_is_passed_over(r: redis.Redis) -> None:
    r.set(keys.RETRY, "not a set")
    r.sadd(keys.QUEUES, "odd")
    r.set(keys.queue("odd"), "not a list")
    add(r, keys.DEAD, dead_job("d1", args=["needle"]), 1.0)
    found = search_ops.search(r, "needle", budget_s=PLENTY_S)
    assert [m.jid for m in found.matches] == ["d1"] and found.next is None
