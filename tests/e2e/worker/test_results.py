"""Job results kept by a real `cogworker run` worker and read with `cogworker.result`: return values
(sync and async), failures for good as JobFailed, nothing final for a failure that will be retried,
a return value JSON can't hold failing the job, the TTL, waiting without polling, the default
setting, and the last run's result for a job that ran twice."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import pytest
import redis
import result_jobs

import cogworker
from cogworker.api import client
from cogworker.settings import Settings
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

APP = {"COGWORKER_REQUIRE": "result_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1"}


def make_retry_due(r: redis.Redis, jid: str) -> dict[str, Any]:
    """The job's retry entry, made due now (its backoff is at least 15 s)."""
    [raw] = wait_until(lambda: r.zrange("cogworker:retry", 0, -1), timeout=15, message="the retry entry")
    entry = json.loads(raw)
    assert entry["jid"] == jid
    r.zadd("cogworker:retry", {raw: 0}, xx=True)
    return dict(entry)


def commands(r: redis.Redis, *names: str) -> int:
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def test_return_values_are_the_results_of_sync_and_async_jobs(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.add.perform_async(2, 3)
    async_jid = result_jobs.async_add.perform_async(4, 5)
    assert jid is not None and async_jid is not None
    workers.start(**APP)
    assert cogworker.result(jid, timeout=15) == {"sum": 5, "parts": [2, 3]}
    assert cogworker.result(async_jid, timeout=15) == 9
    # Kept for result_ttl (60 s), and not consumed by reading it.
    assert 0 < r.pttl(f"cogworker:result:{jid}") <= 60_000
    assert cogworker.result(jid, timeout=0) == {"sum": 5, "parts": [2, 3]}
    wait_until(lambda: r.get("cogworker:stat:processed") == "2", timeout=10, message="both processed")


def test_a_job_failed_for_good_raises_job_failed_with_its_error(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.boom.perform_async("kaput")
    async_jid = result_jobs.async_boom.perform_async("gone")
    assert jid is not None and async_jid is not None
    workers.start(**APP)
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(jid, timeout=15)
    assert (failed.value.jid, failed.value.error_class, failed.value.error_message) == (
        jid,
        "ValueError",
        "kaput",
    )
    assert str(failed.value) == f"job {jid} failed: ValueError: kaput"
    with pytest.raises(cogworker.JobFailed) as async_failed:
        cogworker.result(async_jid, timeout=15)
    assert async_failed.value.error_class == "KeyError"
    # Still filed in dead, as any failure for good.
    wait_until(lambda: r.zcard("cogworker:dead") == 2, timeout=10, message="both in dead")
    assert 0 < r.pttl(f"cogworker:result:{jid}") <= 60_000


def test_a_failure_that_will_be_retried_writes_nothing_and_the_retry_is_the_result(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.flaky.perform_async("a")
    assert jid is not None
    workers.start(**APP)
    entry = make_retry_due(r, jid)
    assert entry["error_class"] == "RuntimeError"
    # Nothing final was written for the failure that is retried: a waiter keeps waiting.
    assert r.exists(f"cogworker:result:{jid}") == 0
    assert cogworker.result(jid, timeout=15) == "ok after 2 tries"


def test_a_return_value_json_cant_hold_fails_the_job_naming_its_type(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.not_json.perform_async("a")  # retry=1: retried once, then dead
    assert jid is not None
    workers.start(**APP)
    entry = make_retry_due(r, jid)
    assert entry["error_class"] == "TypeError"
    assert "result_jobs.not_json" in entry["error_message"]
    assert "return value['when'][1]: datetime is not JSON-native" in entry["error_message"]
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(jid, timeout=15)
    assert failed.value.error_class == "TypeError" and "datetime" in failed.value.error_message
    assert r.get("test:not_json:a") == "2"  # it followed its retry policy: ran twice
    assert r.get("cogworker:stat:processed") is None


def test_result_waits_for_a_job_that_finishes_later_without_polling_redis(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.slow.perform_async(2.0, "late")
    assert jid is not None
    workers.start(**APP)
    wait_until(lambda: r.llen("test:slow_started") == 1, timeout=15, message="the slow job to start")
    # Not EXISTS: the worker's fetch script asks with one whether any suspects list exists, at every
    # fetch, while this waits (a poll of the result would be GETs, or a PTTL).
    before = commands(r, "get", "subscribe", "pttl")
    started = time.monotonic()
    assert cogworker.result(jid, timeout=20) == "late"
    waited = time.monotonic() - started
    assert waited > 1.0  # it did wait for the job
    # One GET, the SUBSCRIBE, one GET after it: the same however long the wait lasts.
    assert commands(r, "get", "subscribe", "pttl") - before == 3


def test_no_result_in_time_raises_result_timeout(r: redis.Redis, configured: object) -> None:
    jid = result_jobs.add.perform_async(1, 1)  # no worker runs it
    assert jid is not None
    started = time.monotonic()
    with pytest.raises(cogworker.ResultTimeout) as timed_out:
        cogworker.result(jid, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 5
    assert isinstance(timed_out.value, TimeoutError) and timed_out.value.jid == jid
    assert jid in str(timed_out.value)
    with pytest.raises(cogworker.ResultTimeout):
        cogworker.result(jid, timeout=0)  # only looks


def test_the_default_setting_keeps_every_jobs_result_unless_it_opts_out(
    r: redis.Redis, settings: Settings, workers: WorkerPool
) -> None:
    client.configure(settings.model_copy(update={"result_ttl_s": 30.0}))
    try:
        jid = result_jobs.plain.perform_async([1, "two"])
        opted_out = result_jobs.plain.set(result_ttl=0).perform_async("none")
    finally:
        client.configure(settings)  # the next test's pushes keep no result by default
    assert jid is not None and opted_out is not None
    pushed = [json.loads(raw) for raw in reversed(r.lrange("cogworker:queue:default", 0, -1))]
    assert [job["result_ttl"] for job in pushed] == [30.0, 0]
    workers.start(**APP)
    assert cogworker.result(jid, timeout=15) == [1, "two"]
    assert 0 < r.pttl(f"cogworker:result:{jid}") <= 30_000
    wait_until(lambda: r.llen("test:plain") == 2, timeout=10, message="both ran")
    wait_until(lambda: r.get("cogworker:stat:processed") == "2", timeout=10, message="both processed")
    assert r.exists(f"cogworker:result:{opted_out}") == 0


def test_a_job_that_keeps_no_result_may_return_anything(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.returns_object.perform_async()
    assert jid is not None
    workers.start(**APP)
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=15, message="processed")
    assert r.get("cogworker:stat:failed") is None
    assert r.keys("cogworker:result:*") == []


def test_a_job_that_ran_twice_has_its_last_runs_result(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = result_jobs.per_run.perform_async("a")
    assert jid is not None
    got: dict[str, Any] = {}

    def wait() -> None:
        try:
            got["value"] = cogworker.result(jid, timeout=40)
        except BaseException as exc:
            got["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()  # waiting from before the first run
    victim = workers.start(**APP, **QUICK_RECOVERY)
    wait_until(lambda: r.llen("test:per_run_started") == 1, timeout=15, message="the first run")
    victim.signal(signal.SIGKILL)
    assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    survivor = workers.start(**APP, **QUICK_RECOVERY)
    waiter.join(timeout=40)
    assert got == {"value": "run 2"}
    assert r.lrange("test:per_run_started", 0, -1)[1] == f"2 {survivor.pid}"
    assert cogworker.result(jid, timeout=0) == "run 2"


def test_a_result_is_gone_after_its_ttl(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    jid = result_jobs.add.set(result_ttl=1.5).perform_async(1, 2)
    assert jid is not None
    workers.start(**APP)
    assert cogworker.result(jid, timeout=15) == {"sum": 3, "parts": [1, 2]}
    assert 0 < r.pttl(f"cogworker:result:{jid}") <= 1500
    wait_until(lambda: r.exists(f"cogworker:result:{jid}") == 0, timeout=5, message="the result to expire")
    with pytest.raises(cogworker.ResultTimeout):
        cogworker.result(jid, timeout=0)
