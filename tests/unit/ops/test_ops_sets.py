"""The retry/scheduled/dead sets against a real Redis: finding by jid, retry now exactly once."""

from __future__ import annotations

import json
import time

import pytest
import redis

from cogworker import codec
from cogworker.ops import NotFound, set_actions
from cogworker.ops import sets as set_ops
from cogworker.store.scripts import Scripts
from tests.support.set_entries import add, dead_job, two_operators


def test_retry_now_moves_a_dead_job_to_its_queue_like_sidekiq(r: redis.Redis) -> None:
    add(r, "cogworker:dead", dead_job("j1", queue="mail"))
    before = time.time()
    entry = set_actions.retry_now(r, Scripts(r), "dead", "j1")
    assert entry.jid == "j1"
    assert r.zcard("cogworker:dead") == 0
    assert r.sismember("cogworker:queues", "mail")
    pushed = json.loads(r.lindex("cogworker:queue:mail", 0))
    assert pushed["retry_count"] == 2  # kept: a failure after this one goes straight back to dead
    assert pushed["error_class"] == "ValueError"
    assert pushed["retried_at"] >= before
    assert pushed["enqueued_at"] >= before


def test_two_operators_retrying_one_dead_entry_enqueue_it_once(r: redis.Redis) -> None:
    """Both look the entry up, both run the move; the ZREM inside the script lets one win. (Run
    30 times: in most rounds both threads reach the script with the entry still there.)"""
    scripts = Scripts(r)
    for round_ in range(30):
        jid = f"race{round_}"
        add(r, "cogworker:dead", dead_job(jid))

        def retry(client: redis.Redis, jid: str = jid) -> str:
            set_actions.retry_now(client, scripts, "dead", jid)
            return "retried"

        outcomes = two_operators(r, retry)
        assert outcomes == ["not found", "retried"], outcomes
    assert r.llen("cogworker:queue:default") == 30
    assert r.zcard("cogworker:dead") == 0


def test_an_entry_swapped_meanwhile_is_found_again(r: redis.Redis) -> None:
    """recovery.py swaps a poison pill's raw dead entry for a complete one; a retry that looked
    the old text up must look again instead of saying the job is gone."""
    raw = add(r, "cogworker:dead", dead_job("j1"))
    entry = set_ops.get(r, "dead", "j1")
    Scripts(r).run("swap_dead", ["cogworker:dead"], [raw, 5.0, codec.dumps(dead_job("j1", error_class="X"))])
    assert entry.raw not in r.zrange("cogworker:dead", 0, -1)
    set_actions.retry_now(r, Scripts(r), "dead", "j1")
    assert json.loads(r.lindex("cogworker:queue:default", 0))["error_class"] == "X"


def test_unreadable_entries_are_shown_and_deleted_but_never_retried(r: redis.Redis) -> None:
    wrapped = {
        "class": "cogworker.UnreadablePayload",
        "jid": "",
        "queue": "default",
        "raw": "{not json",
        "error_class": "cogworker.UnreadablePayload",
        "error_message": "payload is not a JSON object with a job class",
    }
    add(r, "cogworker:dead", wrapped)
    add(r, "cogworker:dead", "plain garbage", score=50)
    found = set_ops.entries(r, "dead")
    assert [e.readable for e in found] == [False, False]
    assert all(e.ref.startswith("raw-") for e in found)
    with pytest.raises(set_actions.NotRetryable, match="unreadable"):
        set_actions.retry_now(r, Scripts(r), "dead", found[0].ref)
    assert set_ops.get(r, "dead", found[1].ref).raw == "plain garbage"
    result = set_actions.retry_all(r, Scripts(r), "dead")
    assert (result.done, result.unreadable) == (0, 2)
    set_actions.delete(r, "dead", found[1].ref)
    assert r.zcard("cogworker:dead") == 1


def test_filters_and_bulk_actions(r: redis.Redis) -> None:
    add(r, "cogworker:retry", dead_job("a", queue="q1", error_message="timeout talking to smtp"), 10)
    add(r, "cogworker:retry", dead_job("b", queue="q2", **{"class": "app.mail.send"}), 20)
    add(r, "cogworker:retry", dead_job("c", queue="q1", **{"class": "app.mail.send"}), 30)
    assert [e.jid for e in set_ops.entries(r, "retry")] == ["a", "b", "c"]  # soonest due first
    assert [e.jid for e in set_ops.entries(r, "retry", set_ops.Filter(queue="q1"))] == ["a", "c"]
    assert [e.jid for e in set_ops.entries(r, "retry", set_ops.Filter(job="mail"))] == ["b", "c"]
    assert [e.jid for e in set_ops.entries(r, "retry", set_ops.Filter(error="smtp"))] == ["a"]
    assert [e.jid for e in set_ops.entries(r, "retry", limit=1)] == ["a"]
    result = set_actions.retry_all(r, Scripts(r), "retry", set_ops.Filter(queue="q1"))
    assert result.done == 2
    assert r.llen("cogworker:queue:q1") == 2
    assert set_actions.delete_all(r, "retry").done == 1
    assert r.exists("cogworker:retry") == 0


def test_scheduled_retry_now_keeps_it_a_first_run(r: redis.Redis) -> None:
    job = {
        "class": "demo_jobs.record",
        "args": ["s"],
        "jid": "s1",
        "queue": "default",
        "at": time.time() + 600,
    }
    add(r, "cogworker:schedule", job, job["at"])
    set_actions.retry_now(r, Scripts(r), "scheduled", "s1")
    pushed = json.loads(r.lindex("cogworker:queue:default", 0))
    assert "at" not in pushed
    assert "retried_at" not in pushed
    with pytest.raises(NotFound):
        set_actions.retry_now(r, Scripts(r), "scheduled", "s1")


def test_jid_search_is_exact(r: redis.Redis) -> None:
    add(r, "cogworker:dead", dead_job("abc123"))
    add(r, "cogworker:dead", dead_job("abc", args=["abc123"]))
    assert set_ops.get(r, "dead", "abc").jid == "abc"
    assert set_ops.find(r, "dead", "ab") is None
    assert set_ops.find(r, "dead", "*") is None
