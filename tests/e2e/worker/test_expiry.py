"""`expires_in`: a job not started within its window is not run, and that end is counted and logged
once; a job started in time runs; the deadline holds for scheduled jobs and through retries."""

from __future__ import annotations

import datetime as dt
import json
import math
import time

import expiry_jobs
import pytest
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.settings import Settings
from cogworker.web import create_app
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

ENV = {"COGWORKER_REQUIRE": "expiry_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1"}


def _past(deadline: float) -> None:
    """Wait (on the clock, not a fixed sleep) until `deadline` has passed."""
    wait_until(lambda: time.time() > deadline + 0.01, timeout=10, message="the deadline to pass")


def _queued_deadlines(r: redis.Redis, queue: str = "default") -> list[float]:
    return [json.loads(raw)["expires_at"] for raw in r.lrange(f"cogworker:queue:{queue}", 0, -1)]


def test_expired_jobs_are_not_run_but_counted_and_logged_once_and_fresh_ones_run(
    r: redis.Redis, configured: Settings, workers: WorkerPool, cli: CLI
) -> None:
    stale = [expiry_jobs.fresh_only.set(expires_in=0.2).perform_async(f"stale{i}") for i in range(3)]
    stale_async = expiry_jobs.fresh_async.set(expires_in=0.2).perform_async("stale-async")
    _past(max(_queued_deadlines(r)))
    # Started, and ready, before the fresh jobs are pushed: fresh_async keeps its decorator's 2 s,
    # and on a loaded CI machine a worker's start alone once took longer than that.
    worker = workers.start(**ENV)
    worker.identity()
    fresh = expiry_jobs.fresh_only.set(expires_in=60).perform_async("fresh")
    fresh_async = expiry_jobs.fresh_async.perform_async("fresh-async")
    expiry_jobs.plain.perform_async("plain")
    # A bound, not a wait: under a loaded machine the worker's start alone has taken over 10 s.
    try:
        wait_until(lambda: r.llen("test:ran") == 3 and r.get("cogworker:stat:expired") == "4", timeout=60)
    except TimeoutError:
        ran, expired = r.lrange("test:ran", 0, -1), r.get("cogworker:stat:expired")
        raise AssertionError(f"ran {ran}, expired {expired}, worker log:\n{worker.log_text()}") from None
    assert sorted(r.lrange("test:ran", 0, -1)) == ["fresh", "fresh-async", "plain"]
    # Counted before it is logged: wait for the four lines, then check there is no fifth.
    wait_until(lambda: len(worker.events_named("job_expired")) >= 4, timeout=5, message="job_expired lines")
    expired = worker.events_named("job_expired")
    assert sorted(e["jid"] for e in expired) == sorted([*stale, stale_async])  # each once
    assert all(isinstance(e["expires_at"], float) for e in expired)
    wait_until(
        lambda: (
            not r.keys("cogworker:inprogress:*")
            or all(r.llen(k) == 0 for k in r.keys("cogworker:inprogress:*"))
        ),
        message="every expired job acknowledged",
    )
    assert r.llen("cogworker:queue:default") == 0 and r.zcard("cogworker:dead") == 0
    assert r.zcard("cogworker:retry") == 0  # an expiry is not a failure
    assert fresh is not None and fresh_async is not None
    # Seen by the operator: `cogworker status` and the dashboard.
    shown = cli("status")
    assert shown.code == 0 and "Expired: 4" in shown.out and "Cancelled: 0" in shown.out
    assert cli("status", "--json").json()["ended"] == {"expired": 4, "cancelled": 0, "limited": 0}
    page = TestClient(create_app(configured)).get("/").text
    assert 'id="expired-total"' in page and '>4</span><span class="label">expired' in page


def test_a_scheduled_jobs_window_starts_at_its_scheduled_time(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    at = time.time() + 1.0
    jid = expiry_jobs.fresh_only.set(expires_in=30).perform_at(at, "scheduled")
    (raw,) = r.zrange("cogworker:schedule", 0, -1)
    payload = json.loads(raw)
    assert payload["jid"] == jid and payload["expires_at"] == pytest.approx(at + 30)
    workers.start(**ENV)
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["scheduled"], timeout=20)
    assert r.get("cogworker:stat:expired") is None


def test_the_deadline_holds_through_retries_and_frees_the_unique_claim_and_marks_the_status(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    # The worker is up before the push: the job's window (5 s) must not pass while it boots, which
    # on a loaded machine under coverage took longer than the 2 s this test once allowed.
    workers.start(**ENV).identity(timeout=30)
    jid = expiry_jobs.fresh_unique.perform_async("u")  # fails: its retry is filed with the deadline
    wait_until(lambda: r.zcard("cogworker:retry") == 1, timeout=20)
    (raw,) = r.zrange("cogworker:retry", 0, -1)
    deadline = json.loads(raw)["expires_at"]
    assert expiry_jobs.fresh_unique.perform_async("u") is None  # the claim is still held
    _past(deadline)
    r.zadd("cogworker:retry", {raw: 0}, xx=True)  # the retry comes due after the deadline
    wait_until(lambda: r.get("cogworker:stat:expired") == "1", timeout=20)
    assert r.lrange("test:ran", 0, -1) == ["u"]  # only the first try ran
    assert r.hget(f"cogworker:status:{jid}", "status") == "expired"
    wait_until(lambda: expiry_jobs.fresh_unique.perform_async("u") is not None, message="claim released")


@pytest.mark.parametrize("bad", [0, -1, "10", True, math.nan, math.inf, dt.timedelta(0)])
def test_a_bad_expires_in_is_a_type_error_at_the_decorator_and_at_set(bad: object) -> None:
    with pytest.raises(TypeError, match="expires_in must be a positive number of seconds"):
        expiry_jobs.plain.set(expires_in=bad)
    with pytest.raises(TypeError, match="expires_in"):
        from cogworker import job

        job(expires_in=bad)


def test_an_expired_job_that_keeps_its_result_ends_its_waiter_with_job_expired(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    jid = expiry_jobs.fresh_only.set(expires_in=0.2, result_ttl=60).perform_async("stale")
    assert jid is not None
    _past(max(_queued_deadlines(r)))
    workers.start(**ENV)
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(jid, timeout=20)
    assert failed.value.error_class == "cogworker.JobExpired"
    assert "not started before its expires_at" in failed.value.error_message
    assert r.llen("test:ran") == 0
    wait_until(lambda: r.get("cogworker:stat:expired") == "1", message="the expiry counted")
