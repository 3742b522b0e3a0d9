"""One page of a queue's jobs and deleting one of them, against a real Redis."""

from __future__ import annotations

import json

import pytest
import redis

from cogworker.ops import NotFound
from cogworker.ops import queues as queue_ops
from cogworker.ops.processes import ProcessInfo


def push(r: redis.Redis, queue: str, count: int, start: int = 0) -> None:
    """`count` jobs pushed as the client does (LPUSH): j<start> first, so the newest is at index 0."""
    for n in range(start, start + count):
        payload = {"jid": f"j{n}", "class": "demo.work", "args": [n], "enqueued_at": 1000.0 + n}
        r.lpush(f"cogworker:queue:{queue}", json.dumps(payload))
    r.sadd("cogworker:queues", queue)


def test_jobs_page_reads_a_slice_newest_first(r: redis.Redis) -> None:
    push(r, "mail", 30)
    page = queue_ops.jobs_page(r, "mail", 25, 25)
    assert [(j.index, j.jid, j.args) for j in page] == [(25 + k, f"j{4 - k}", [4 - k]) for k in range(5)]
    first = queue_ops.jobs_page(r, "mail", 0, 2)
    assert [(j.jid, j.job, j.enqueued_at) for j in first] == [
        ("j29", "demo.work", 1029.0),
        ("j28", "demo.work", 1028.0),
    ]
    assert json.loads(first[0].raw)["jid"] == "j29"
    assert queue_ops.jobs_page(r, "nothing-here", 0, 25) == []


def test_an_unreadable_payload_is_listed_without_fields(r: redis.Redis) -> None:
    r.lpush("cogworker:queue:q", "not json")
    [job] = queue_ops.jobs_page(r, "q", 0, 25)
    assert (job.raw, job.jid, job.job, job.args, job.enqueued_at) == ("not json", None, None, [], None)


def test_delete_job_removes_exactly_that_job_even_after_the_queue_moved(r: redis.Redis) -> None:
    push(r, "mail", 10)
    [shown] = [j for j in queue_ops.jobs_page(r, "mail", 0, 10) if j.jid == "j3"]
    push(r, "mail", 20, start=100)  # pushed meanwhile: j3 is now 20 places further
    deleted = queue_ops.delete_job(r, "mail", "j3", shown.index)
    assert deleted.jid == "j3"
    left = [json.loads(x)["jid"] for x in r.lrange("cogworker:queue:mail", 0, -1)]
    assert "j3" not in left and len(left) == 29
    with pytest.raises(NotFound, match="no longer in queue mail"):
        queue_ops.delete_job(r, "mail", "j3", shown.index)


def test_delete_job_looks_only_near_the_index_it_was_shown_at(r: redis.Redis) -> None:
    push(r, "big", 200)
    # j0 sits at index 199: shown at index 0 it is out of the window, so it is not found (no scan).
    with pytest.raises(NotFound):
        queue_ops.delete_job(r, "big", "j0", 0)
    assert r.llen("cogworker:queue:big") == 200
    assert queue_ops.delete_job(r, "big", "j0", 160).index == 199
    assert r.llen("cogworker:queue:big") == 199


def test_slot_comes_from_a_swarm_childs_tag() -> None:
    def info(tag: str) -> ProcessInfo:
        return ProcessInfo("i", "h", 1, tag, "", [], 1, None, None, 0, 0, False, None, 0)

    assert info("slot 3").slot == 3
    assert info("").slot is None
    assert info("slot x").slot is None
