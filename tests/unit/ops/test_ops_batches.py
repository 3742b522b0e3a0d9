"""ops/batches.py against the session's real Redis: the retry-set search for failing members (only
the named batches' own members, one row per jid however often ZSCAN returns it, and a search cut
short by its time budget says so), and the state a batch with failing members shows."""

from __future__ import annotations

import json

import redis

from cogworker.api.batch_status import BatchStatus
from cogworker.ops import batches as batch_ops
from cogworker.store import keys


def retrying(r: redis.Redis, jid: str, bid: str | None, due: float, count: int = 0) -> None:
    job = {"jid": jid, "class": "app.sync", "queue": "default", "args": [], "retry_count": count}
    job |= {"error_class": "ValueError", "error_message": f"{jid} broke"}
    if bid is not None:
        job["bid"] = bid
    r.zadd(keys.RETRY, {json.dumps(job): due})


def test_failing_finds_each_batch_s_own_members_in_the_retry_set(r: redis.Redis) -> None:
    retrying(r, "a2", "aaaa", 200.0, count=1)
    retrying(r, "a1", "aaaa", 100.0)
    retrying(r, "b1", "bbbb", 50.0)
    retrying(r, "x1", None, 10.0)  # no batch
    retrying(r, "n1", "aaaa-child", 10.0)  # a bid that merely contains the other: not its member
    one = batch_ops.failing(r, ["aaaa"])
    assert one.searched and [m.jid for m in one.of("aaaa")] == ["a1", "a2"]  # soonest retry first
    assert one.of("aaaa")[1].error == "ValueError: a2 broke" and one.of("aaaa")[1].retry_count == 1
    both = batch_ops.failing(r, ["aaaa", "bbbb"])
    assert {bid: [m.jid for m in ms] for bid, ms in both.by_bid.items()} == {
        "aaaa": ["a1", "a2"],
        "bbbb": ["b1"],
    }
    assert batch_ops.failing(r, []).by_bid == {}


def test_a_search_cut_short_by_its_budget_says_so(r: redis.Redis) -> None:
    for n in range(3000):
        retrying(r, f"o{n}", "other", float(n))
    retrying(r, "m1", "mine", 1.0)
    ticks = iter([0.0] + [10.0] * 100)  # the budget is spent after the first ZSCAN call
    cut = batch_ops.failing(r, ["mine", "other"], budget_s=1.0, clock=lambda: next(ticks))
    assert not cut.searched and len(cut.of("other")) < 3000
    whole = batch_ops.failing(r, ["mine", "other"], budget_s=60.0)  # time enough for any machine
    assert whole.searched and len(whole.of("other")) == 3000 and [m.jid for m in whole.of("mine")] == ["m1"]


def test_a_batch_with_failing_members_is_not_just_running() -> None:
    status = BatchStatus("aaaa", "", 3, 3, 0, 0, 0, 1.0, None, None, 0)
    member = batch_ops.FailingMember("a1", "app.sync", "ValueError", "bad", 0, 2.0)
    view = batch_ops.BatchView(status, [member, member])
    assert (view.state, view.tone, view.finished, view.succeeded) == ("running, 2 failing", "danger", 0, 0)
    assert batch_ops.BatchView(status, []).state == "running"
    done = BatchStatus("aaaa", "", 6, 0, 6, 3, 1, 1.0, 2.0, None, 0)
    assert (batch_ops.BatchView(done, []).state, batch_ops.BatchView(done, []).succeeded) == (
        "complete with failures",
        3,
    )
