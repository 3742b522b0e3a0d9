"""Time limits in a real `cogworker run` worker: a sync job past its limit fails with JobTimeout
raised in its thread, an async job is cancelled; both follow their retry policy; the default setting
applies to jobs without a limit and a job's own limit wins; many jobs ending just as their limit
falls each end exactly once; a job stuck where no exception reaches it is filed once, and the worker
run alone stops (exit 1) for its process manager to start a fresh one, after its other jobs finish."""

from __future__ import annotations

import json
import subprocess
import sys

import demo_jobs
import pytest
import redis
import timeout_jobs

import cogworker
from cogworker import exitcodes
from cogworker.api.backtrace import lines_of
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool

APP = {"COGWORKER_REQUIRE": "timeout_jobs,demo_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1"}


def entries(r: redis.Redis, key: str) -> list[dict]:
    return [json.loads(raw) for raw in r.zrange(key, 0, -1)]


def test_a_sync_job_past_its_limit_fails_with_job_timeout_and_is_retried(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = timeout_jobs.spin.perform_async("long", 30)
    worker = workers.start(**APP)
    [entry] = wait_until(lambda: entries(r, "cogworker:retry"), timeout=15, message="the retry")
    assert (entry["jid"], entry["error_class"]) == (jid, "cogworker.api.time_limits.JobTimeout")
    assert entry["error_message"] == "the job ran past its time limit of 0.5s"
    assert any("_spin" in line for line in lines_of(entry) or [])  # interrupted in the job's own code
    assert r.lrange("test:started", 0, -1) == ["long"] and r.llen("test:ran") == 0
    assert r.get("cogworker:stat:failed") == "1"
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") == 0
    # The watchdog logs after it has raised in the job's thread, which may fail and file the job first.
    reached = wait_until(
        lambda: worker.events_named("job_time_limit_reached"), timeout=10, message="the line"
    )
    assert reached[0]["jid"] == jid
    assert worker.stop() == 0


def test_retry_zero_goes_to_dead(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    jid = timeout_jobs.spin_to_dead.perform_async("long", 30)
    workers.start(**APP)
    [entry] = wait_until(lambda: entries(r, "cogworker:dead"), timeout=15, message="dead")
    assert entry["jid"] == jid and entry["error_class"].endswith("JobTimeout")
    assert r.zcard("cogworker:retry") == 0


def test_an_async_job_past_its_limit_is_cancelled_and_fails_with_job_timeout(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = timeout_jobs.async_sleep.perform_async("long", 30)
    workers.start(**APP)
    [entry] = wait_until(lambda: entries(r, "cogworker:retry"), timeout=15, message="the retry")
    assert (entry["jid"], entry["error_class"]) == (jid, "cogworker.api.time_limits.JobTimeout")
    assert "time limit of 0.5s" in entry["error_message"]
    assert r.lrange("test:started", 0, -1) == ["long"] and r.llen("test:ran") == 0
    timeout_jobs.async_sleep.perform_async("quick", 0.05)  # the loop goes on serving
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["quick"], timeout=10, message="the next async job")


def test_a_sync_job_past_its_limit_inside_a_c_call_fails_with_job_timeout_when_it_returns(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """`time.sleep(3)` under a 0.5 s limit: the exception can't be raised inside the sleep, and is
    withdrawn (a pending exception stalls traced threads); the run is a JobTimeout all the same once
    the sleep returns, retried by its policy, counted failed, and the log says what happened. (A
    refire may land just as the sleep returns, about one time in ten: then it stops the body.)"""
    jid = timeout_jobs.sleeper.perform_async("slow", 3)
    worker = workers.start(**APP)
    [entry] = wait_until(lambda: entries(r, "cogworker:retry"), timeout=20, message="the retry")
    assert (entry["jid"], entry["error_class"]) == (jid, "cogworker.api.time_limits.JobTimeout")
    assert entry["error_message"].startswith("the job ran past its time limit of 0.5s")
    assert entry["retry_count"] == 0
    assert r.get("cogworker:stat:failed") == "1" and r.get("cogworker:stat:processed") is None
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") == 0
    [undelivered] = worker.events_named("job_time_limit_undelivered")
    assert undelivered["jid"] == jid
    [failed] = wait_until(lambda: worker.events_named("job_fail"), timeout=10, message="the job_fail line")
    assert failed["to"] == "retry" and failed["error"].startswith("cogworker.api.time_limits.JobTimeout")
    assert worker.events_named("job_done") == []
    crossed = worker.events_named("job_time_limit_crossed")
    if crossed:  # the sleep returned and the body ended with no JobTimeout raised in it
        assert crossed[0]["jid"] == jid and crossed[0]["elapsed_s"] >= 3
        assert ": its call returned after" in entry["error_message"]
        assert r.lrange("test:slept", 0, -1) == ["slow"]
    assert worker.stop() == 0


def test_a_job_past_its_limit_inside_a_c_call_with_no_retries_left_dies_and_its_hooks_run(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = timeout_jobs.sleeper_to_dead.perform_async("slow", 1.5)
    worker = workers.start(**{**APP, "COGWORKER_REQUIRE": "timeout_jobs,death_jobs"})
    [entry] = wait_until(lambda: entries(r, "cogworker:dead"), timeout=20, message="dead")
    assert entry["jid"] == jid and entry["error_class"].endswith("JobTimeout")
    deaths = wait_until(lambda: r.lrange("test:deaths", 0, -1), timeout=15, message="the on_death hook")
    [death] = [json.loads(d) for d in deaths]
    assert (death["jid"], death["error_class"]) == (jid, "cogworker.api.time_limits.JobTimeout")
    assert r.zcard("cogworker:retry") == 0 and r.get("cogworker:stat:failed") == "1"
    assert worker.stop() == 0


def test_the_default_limit_applies_and_a_jobs_own_limit_wins(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    limited = timeout_jobs.spin_default.perform_async("default-limit", 30)
    own = timeout_jobs.spin_default.set(timeout_s=10).perform_async("own-limit", 1.0)
    workers.start(**APP, COGWORKER_JOB_TIMEOUT_S="0.4", COGWORKER_CONCURRENCY="2")
    [entry] = wait_until(lambda: entries(r, "cogworker:dead"), timeout=15, message="dead")
    assert entry["jid"] == limited and "time limit of 0.4s" in entry["error_message"]
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["own-limit"], timeout=15, message="own limit")
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=10, message="processed")
    assert own is not None and r.zcard("cogworker:dead") == 1


def test_jobs_ending_as_their_limit_falls_each_end_exactly_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """The race through the whole worker: 400 jobs of about their limit's length on 8 threads.
    Every one is counted once, processed or dead; none is lost, none stays in progress, and no
    JobTimeout ever escapes into cogworker's own code (a job thread error)."""
    total = 400
    limited = timeout_jobs.short.set(timeout_s=0.01)
    jids = [limited.perform_async(0.006 + (i % 9) * 0.001) for i in range(total)]
    assert len(set(jids)) == total and None not in jids
    worker = workers.start(**APP, COGWORKER_CONCURRENCY="8")

    def done() -> bool:
        processed = int(r.get("cogworker:stat:processed") or 0)
        return processed + r.zcard("cogworker:dead") == total

    wait_until(done, timeout=60, message="every job ended")
    dead = [e["jid"] for e in entries(r, "cogworker:dead")]
    assert len(dead) == len(set(dead)) and set(dead) <= set(jids)
    assert 0 < len(dead) < total, "the limit fell on some jobs and not on others"
    assert int(r.get("cogworker:stat:processed") or 0) == total - len(dead)
    assert int(r.get("cogworker:stat:failed") or 0) == len(dead)
    assert r.zcard("cogworker:retry") == 0 and r.llen("cogworker:queue:default") == 0
    wait_until(lambda: r.llen(f"cogworker:inprogress:{worker.identity()}") == 0, timeout=10, message="acks")
    assert worker.stop() == 0
    assert worker.events_named("job_thread_error") == []
    assert all(
        e["error"].startswith("cogworker.api.time_limits.JobTimeout") for e in worker.events_named("job_fail")
    )


def test_a_stuck_job_is_filed_once_and_a_lone_worker_stops_for_a_fresh_one(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = timeout_jobs.blocked.set(result_ttl=60).perform_async("stuck")
    assert jid is not None
    worker = workers.start(**APP, COGWORKER_JOB_TIMEOUT_GRACE_S="0.5", COGWORKER_CONCURRENCY="2")
    wait_until(lambda: r.get("test:runs:stuck") == "1", timeout=15, message="the stuck job started")
    demo_jobs.sleepy.perform_async("neighbour", 1.5)  # runs beside it, and must finish
    wait_until(lambda: r.llen("test:started") == 1, timeout=10, message="the neighbour started")
    assert worker.proc.wait(timeout=20) == exitcodes.FAILURE
    [entry] = entries(r, "cogworker:dead")
    assert entry["jid"] == jid and entry["error_class"].endswith("JobTimeout")
    assert "stuck past its time limit of 0.3s" in entry["error_message"]
    assert [line.split()[0] for line in r.lrange("test:ran", 0, -1)] == ["neighbour"]
    [stuck] = worker.events_named("job_stuck")
    assert stuck["jid"] == jid and "os.read(read_end, 1)" in stuck["stack"]
    assert worker.events_named("worker_stopping_for_stuck_job")
    # A waiter on its result learns of the failure (its result_ttl kept it).
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(jid, timeout=0)
    assert failed.value.error_class.endswith("JobTimeout")
    # Off the in-progress list and never requeued: a fresh worker does not run it again.
    assert r.llen("cogworker:queue:default") == 0
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") == 0
    assert r.get("cogworker:stat:failed") == "1"
    again = workers.start(**APP)
    demo_jobs.record.perform_async("after")
    wait_until(lambda: "after" in " ".join(r.lrange("test:ran", 0, -1)), timeout=15, message="a job ran")
    assert r.get("test:runs:stuck") == "1" and r.zcard("cogworker:dead") == 1
    assert again.stop() == 0


def test_bad_time_limit_settings_exit_78(redis_server: RedisServer) -> None:
    for name, value in (("JOB_TIMEOUT_S", "0"), ("JOB_TIMEOUT_S", "soon"), ("JOB_TIMEOUT_GRACE_S", "-1")):
        done = subprocess.run(
            [sys.executable, "-m", "cogworker", "run"],
            env={
                "PATH": "/usr/bin:/bin",
                "COGWORKER_REDIS_URL": redis_server.url,
                f"COGWORKER_{name}": value,
            },
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == exitcodes.CONFIG_ERROR, (name, value, done.stderr)
        assert f"COGWORKER_{name}" in done.stderr


def test_an_async_job_that_ignores_its_cancellation_is_filed_as_stuck_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = timeout_jobs.async_stubborn.perform_async("stubborn")
    worker = workers.start(**APP, COGWORKER_JOB_TIMEOUT_GRACE_S="0.5")
    assert worker.proc.wait(timeout=20) == exitcodes.FAILURE
    [entry] = entries(r, "cogworker:dead")
    assert entry["jid"] == jid and "stuck past its time limit of 0.3s" in entry["error_message"]
    assert r.lrange("test:cancelled", 0, -1)[:1] == ["stubborn"]  # it was cancelled at its limit
    assert r.get("test:runs:stubborn") == "1" and r.llen("cogworker:queue:default") == 0
    assert [e["jid"] for e in worker.events_named("job_stuck")] == [jid]
