"""Failures: retries with backoff, then dead; jobs that can't be imported or decoded; the dead cap."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import demo_jobs
import pytest
import redis

from cogworker import codec
from cogworker.api.backtrace import lines_of
from cogworker.api.retry import backoff_s, on_failure
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

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
    assert any("ValueError: last" in line for line in lines_of(third.payload) or [])


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
    assert any("kaput" in line for line in lines_of(dead) or [])
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
    assert dead["error_class"] == "cogworker.JobNotFound"
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


HOSTILE = {"COGWORKER_REQUIRE": "demo_jobs,hostile_jobs", "COGWORKER_CONCURRENCY": "2", **FAST}


def entries(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.zrange(key, 0, -1)]


def by_jid(r: redis.Redis) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every retry and dead entry by jid: (the set's name, the entry)."""
    found = {}
    for name, key in (("retry", "cogworker:retry"), ("dead", "cogworker:dead")):
        for entry in entries(r, key):
            found[entry.get("jid")] = (name, entry)
    return found


def assert_clean_stop(r: redis.Redis, worker: Any) -> None:
    """Nothing left in progress (acknowledgements ride on the next fetch: wait for it), then a clean
    stop: exit 0, no thread error, no presence key left behind."""
    wait_until(
        lambda: not [k for k in r.keys("cogworker:inprogress:*") if r.llen(k)],
        timeout=10,
        message="nothing in progress",
    )
    assert worker.stop() == 0
    assert worker.events_named("job_thread_error") == []
    assert r.keys("cogworker:process:*") == []


def test_jobs_raising_base_exceptions_are_filed_and_the_worker_goes_on(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    import hostile_jobs

    jids = {
        "exits": hostile_jobs.exits.perform_async(3),
        "interrupts": hostile_jobs.interrupts.perform_async(),
        "generator_exit": hostile_jobs.generator_exit.perform_async(),
        "unprintable": hostile_jobs.unprintable.perform_async(),
    }
    worker = workers.start(**HOSTILE)
    wait_until(lambda: len(by_jid(r)) == 4, timeout=15, message="the four jobs filed")
    # Both threads went through those: they still take jobs.
    for i in range(4):
        demo_jobs.record.perform_async(f"after-{i}")
    wait_until(lambda: r.llen("test:ran") == 4, timeout=15, message="the jobs behind them")
    filed = by_jid(r)
    assert filed[jids["exits"]][0] == "retry"
    assert filed[jids["exits"]][1]["error_class"] == "SystemExit"
    assert filed[jids["interrupts"]][0] == "dead"
    assert filed[jids["interrupts"]][1]["error_class"] == "KeyboardInterrupt"
    assert filed[jids["generator_exit"]][1]["error_class"] == "GeneratorExit"
    unprintable = filed[jids["unprintable"]][1]
    assert unprintable["error_class"] == "hostile_jobs.Unprintable"
    assert "could not be read" in unprintable["error_message"]
    assert_clean_stop(r, worker)


ODD_FIELDS: list[dict[str, Any]] = [
    {"jid": "count-null", "retry_count": None},
    {"jid": "count-abc", "retry_count": "abc"},
    {"jid": "count-list", "retry_count": [1]},
    {"jid": "count-huge", "retry_count": 10**18, "retry": 10**18},
    {"jid": "retry-x", "retry": "x"},
    {"jid": "retry-list", "retry": [1], "retry_count": {"a": 1}},
    {"jid": "args-not-list", "args": "abc"},
    {"jid": "kwargs-list", "kwargs": [1, 2]},
    {"jid": "failed-at-odd", "failed_at": {"x": 1}, "retry_count": -5},
]


def test_payloads_with_odd_field_values_end_filed(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    for fields in ODD_FIELDS:
        job = {
            "class": "hostile_jobs.fails",
            "args": [],
            "kwargs": {},
            "queue": "default",
            "retry": 1,
            **fields,
        }
        push_raw(r, codec.dumps(job))
    worker = workers.start(**HOSTILE)
    wait_until(lambda: len(by_jid(r)) == len(ODD_FIELDS), timeout=15, message="every odd payload filed")
    demo_jobs.record.perform_async("behind")
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the job behind them")
    filed = by_jid(r)
    assert filed["count-null"][0] == "retry" and filed["count-null"][1]["retry_count"] == 0
    assert "retry_count null is not a count" in " ".join(filed["count-null"][1]["cogworker_notes"])
    assert 'retry_count "abc" is not a count' in " ".join(filed["count-abc"][1]["cogworker_notes"])
    assert filed["retry-x"][0] == "dead"
    assert 'retry "x"' in " ".join(filed["retry-x"][1]["cogworker_notes"])
    assert filed["args-not-list"][1]["error_class"] == "TypeError"
    assert filed["kwargs-list"][1]["error_class"] == "TypeError"
    assert_clean_stop(r, worker)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_failures_json_cant_hold_are_filed_and_the_filings_behind_them_too(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    import hostile_jobs

    surrogate = hostile_jobs.surrogate_error.perform_async()
    # Nested 300 deep: orjson reads it (up to 1,024 levels) but won't write it (254).
    deep = '{"class":"hostile_jobs.fails","args":[%s],"kwargs":{},"jid":"deep","queue":"default","retry":3}'
    push_raw(r, deep % nested(300))
    worker = workers.start(**HOSTILE)
    wait_until(lambda: len(by_jid(r)) == 2, timeout=15, message="both filed")
    later = demo_jobs.boom_once.perform_async("later")
    wait_until(lambda: later in by_jid(r), timeout=15, message="a later failure filed too")
    filed = by_jid(r)
    where, entry = filed[surrogate]
    assert where == "retry"
    assert entry["error_message"] == "bad \\xff and \\ud800 text"
    where, entry = filed["deep"]
    assert where == "dead"  # its args can't be stored: a retry wouldn't run the same job
    assert entry["raw"] == deep % nested(300)  # the original, whole
    assert any("nested deeper" in note for note in entry["cogworker_notes"])
    assert worker.events_named("redis_command_failed") == []
    assert_clean_stop(r, worker)


def test_middleware_sees_a_base_exception_and_odd_fields_as_the_jobs_failure(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    import hostile_jobs

    from cogworker.api.job_status import details

    exits = hostile_jobs.tracked_exit.perform_async("x")
    assert exits is not None and r.keys("cogworker:unique:*")
    # A tracked payload whose retry_count isn't a count: the status middleware must not raise on it.
    odd = {"class": "hostile_jobs.tracked_fails", "args": [], "kwargs": {}, "jid": "odd", "queue": "default"}
    push_raw(r, codec.dumps({**odd, "retry": 3, "status": True, "retry_count": "abc"}))
    worker = workers.start(**HOSTILE)
    wait_until(lambda: {exits, "odd"} <= set(by_jid(r)), timeout=15, message="both filed")
    exit_status = details(exits)
    assert exit_status is not None and exit_status["status"] == "failed"
    assert exit_status["error_class"] == "SystemExit"
    assert r.keys("cogworker:unique:*") == []  # the claim was given back
    odd_status = details("odd")
    assert odd_status is not None and odd_status["status"] == "retrying"
    assert odd_status["error_class"] == "RuntimeError"  # the job's error, not the filing's
    assert by_jid(r)["odd"][1]["error_class"] == "RuntimeError"
    assert_clean_stop(r, worker)


ODD_VALUES: list[Any] = [None, "abc", [1], {"a": 1}, True, -5, 1.5, 3.0, "7", " 2 ", 10**30]
ODD_VALUES += [float("nan"), float("inf")]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_filing_reads_around_any_retry_count_or_retry(value: Any) -> None:
    from cogworker.api import retry

    for fields in ({"retry_count": value}, {"retry": value}, {"retry_count": value, "retry": value}):
        job = {"class": "x", "jid": "j", "queue": "default", "args": [], **fields}
        filing = retry.storable(on_failure(job, SystemExit(1), now=1000.0))
        assert filing.set_key in ("cogworker:retry", "cogworker:dead")
        assert "retry_count" not in filing.payload or isinstance(filing.payload["retry_count"], int)
        assert filing.text is not None and json.loads(filing.text)["error_class"] == "SystemExit"
    for count in ("7", 7.0):  # what int() used to accept still counts
        failed = on_failure({"class": "x", "retry_count": count, "retry": 10}, ValueError())
        assert failed.payload["retry_count"] == 8


def test_a_huge_error_message_is_stored_capped_in_the_backtrace_too() -> None:
    failed = on_failure({"class": "x", "jid": "j", "queue": "default"}, ValueError("x" * 5_000_000))
    assert len(failed.payload["error_message"]) == 10_000
    assert max(len(line) for line in lines_of(failed.payload) or []) <= 10_000
