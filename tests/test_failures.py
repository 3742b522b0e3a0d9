"""Failures: retries with backoff, then dead; jobs that can't be imported or decoded; the dead cap."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import demo_jobs
import redis

from cogworker import codec
from cogworker.retry import backoff_s, on_failure
from tests.redis_server import wait_until
from tests.workers import WorkerPool

FAST = {"COGWORKER_POLL_INTERVAL_S": "0.1"}


def test_backoff_follows_sidekiqs_curve() -> None:
    rng = random.Random(1)
    for count in range(6):
        for _ in range(50):
            delay = backoff_s(count, rng)
            assert count**4 + 15 <= delay <= count**4 + 15 + 9 * (count + 1)


def test_on_failure_counts_and_decides() -> None:
    job: dict[str, Any] = {"class": "x", "jid": "j", "queue": "default", "retry": 2, "args": []}
    first = on_failure(job, ValueError("nope"), now=1000.0)
    assert first.set_key == "cogworker:retry"
    assert first.payload["retry_count"] == 0
    assert first.payload["failed_at"] == 1000.0
    assert first.payload["error_class"] == "ValueError"
    assert first.payload["error_message"] == "nope"
    assert 1015 <= first.score <= 1024
    second = on_failure(first.payload, ValueError("again"), now=2000.0)
    assert second.payload["retry_count"] == 1 and second.payload["retried_at"] == 2000.0
    third = on_failure(second.payload, ValueError("last"), now=3000.0)
    assert third.dead and third.score == 3000.0
    assert any("ValueError: last" in line for line in third.payload["backtrace"])


def make_retries_due(r: redis.Redis) -> None:
    for raw in r.zrange("cogworker:retry", 0, -1):
        r.zadd("cogworker:retry", {raw: 0}, xx=True)


def test_a_raising_job_goes_retry_then_dead(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    jid = demo_jobs.boom.perform_async("kaput")  # retry=2: two retries, then dead
    workers.start(**FAST)

    def retry_entry(count: int) -> dict[str, Any] | None:
        for raw in r.zrange("cogworker:retry", 0, -1):
            entry = json.loads(raw)
            if entry["retry_count"] == count:
                return entry
        return None

    for expected_count in (0, 1):
        entry = wait_until(lambda c=expected_count: retry_entry(c), timeout=15, message="the job in retry")
        assert entry["jid"] == jid
        assert entry["error_class"] == "ValueError"
        assert entry["error_message"] == "kaput"
        make_retries_due(r)
    wait_until(lambda: r.zcard("cogworker:dead") == 1, timeout=15, message="the job in dead")
    dead = json.loads(r.zrange("cogworker:dead", 0, -1)[0])
    assert dead["jid"] == jid and dead["retry_count"] == 2
    assert dead["error_class"] == "ValueError"
    assert any("kaput" in line for line in dead["backtrace"])
    assert r.get("cogworker:stat:failed") == "3"
    assert r.keys("cogworker:inprogress:*") == []


def test_retry_false_goes_straight_to_dead(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    demo_jobs.boom_once.perform_async("once")
    workers.start()
    wait_until(lambda: r.zcard("cogworker:dead") == 1, timeout=15, message="dead")
    assert r.zcard("cogworker:retry") == 0
    assert json.loads(r.zrange("cogworker:dead", 0, -1)[0])["error_class"] == "RuntimeError"


def push_raw(r: redis.Redis, raw: str, queue: str = "default") -> None:
    r.lpush(f"cogworker:queue:{queue}", raw)


def test_a_job_that_cant_be_imported_is_filed_with_a_clear_error(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    payload = {
        "class": "nowhere_module.missing",
        "args": [],
        "kwargs": {},
        "jid": "abc",
        "queue": "default",
        "retry": 0,
    }
    push_raw(r, codec.dumps(payload))
    demo_jobs.record.perform_async("behind")
    workers.start()
    wait_until(lambda: r.zcard("cogworker:dead") == 1, timeout=15, message="dead")
    dead = json.loads(r.zrange("cogworker:dead", 0, -1)[0])
    assert dead["error_class"] == "cogworker.jobs.JobNotFound"
    assert "nowhere_module" in dead["error_message"]
    wait_until(lambda: r.llen("test:ran") == 1, timeout=10, message="the job behind it")


def test_garbage_payloads_go_to_dead_and_the_jobs_behind_them_run(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    push_raw(r, "not json at all")
    push_raw(r, "[1, 2, 3]")
    push_raw(r, '{"no": "class"}')
    demo_jobs.record.perform_async("after-garbage")
    worker = workers.start()
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the good job")
    wait_until(lambda: r.zcard("cogworker:dead") == 3, timeout=15, message="3 dead entries")
    raws = {json.loads(e)["raw"] for e in r.zrange("cogworker:dead", 0, -1)}
    assert raws == {"not json at all", "[1, 2, 3]", '{"no": "class"}'}
    assert all(
        json.loads(e)["error_class"] == "cogworker.UnreadablePayload"
        for e in r.zrange("cogworker:dead", 0, -1)
    )
    assert worker.proc.poll() is None  # nothing crashed
    assert worker.stop() == 0


def test_dead_set_is_capped(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    r.zadd("cogworker:dead", {'{"class":"ancient","jid":"old"}': time.time() - 400 * 24 * 3600})
    for i in range(5):
        demo_jobs.boom_once.perform_async(str(i))
    workers.start(COGWORKER_DEAD_MAX_JOBS="3")
    wait_until(lambda: r.get("cogworker:stat:failed") == "5", timeout=15, message="5 failures")
    entries = r.zrange("cogworker:dead", 0, -1)
    assert len(entries) == 3
    assert all("ancient" not in e for e in entries)
