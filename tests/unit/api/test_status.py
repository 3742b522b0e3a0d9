"""Job status against a real Redis: the lifecycle, opting in, expiry, outages, testing modes."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import status_jobs
from structlog.testing import capture_logs

import cogworker
from cogworker import server_chain, testing
from cogworker.api import client as cw_client
from cogworker.api.job_status import details, on_push, on_run
from cogworker.settings import Settings, load_settings
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.settling.settle import Settler
from tests.support.components import build
from tests.support.inproc import Runner
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


@pytest.fixture(autouse=True)
def _jobs_see_the_test_redis(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_server.url)


def test_a_tracked_job_goes_queued_working_complete(r: redis.Redis, configured: Settings) -> None:
    seen_while_running: list[str | None] = []

    def peek(job: dict[str, Any], call_next: Any) -> None:
        seen_while_running.append(cogworker.status(job["jid"]))
        call_next()

    server_chain.add(peek)  # inside the built-in status middleware
    jid = status_jobs.tracked.perform_async("a")
    assert jid is not None
    assert cogworker.status(jid) == "queued"
    assert 1795_000 < r.pttl(f"cogworker:status:{jid}") <= 1800_000  # settings.status_ttl_s
    assert Runner(configured).run_next()
    assert seen_while_running == ["working"]
    assert cogworker.status(jid) == "complete"
    info = details(jid)
    assert info is not None
    assert info["class"] == "status_jobs.tracked" and info["queue"] == "default"
    assert float(info["updated_at"]) > 0


def test_a_failing_job_goes_retrying_then_failed(r: redis.Redis, configured: Settings) -> None:
    jid = status_jobs.tracked_flaky.perform_async("b")  # retry=1
    assert jid is not None
    runner = Runner(configured)
    assert runner.run_next()
    assert cogworker.status(jid) == "retrying"
    info = details(jid)
    assert info is not None
    assert info["error_class"] == "ValueError" and info["error_message"] == "flaky b"
    # It waits for its retry: the status lives past its usual TTL by as long as that can take.
    assert r.pttl(f"cogworker:status:{jid}") > 1800_000
    assert runner.make_retries_due() == 1
    assert cogworker.status(jid) == "retrying"  # not re-queued by the poller: still what it was
    assert runner.run_next()
    assert cogworker.status(jid) == "failed"
    assert r.zcard("cogworker:dead") == 1


def test_status_is_opt_in_per_job_or_for_all_jobs(r: redis.Redis, settings: Settings) -> None:
    cw_client.configure(settings)
    untracked = status_jobs.untracked.perform_async("c")
    assert untracked is not None
    assert cogworker.status(untracked) is None
    assert r.keys("cogworker:status:*") == []

    cw_client.configure(load_settings(redis_url=settings.redis_url, status_all=True))
    everything = status_jobs.untracked.perform_async("d")
    opted_out = status_jobs.never_tracked.perform_async("e")
    assert everything is not None and opted_out is not None
    assert cogworker.status(everything) == "queued"
    assert cogworker.status(opted_out) is None
    # The choice travels in the payload: workers follow it whatever their own settings say.
    runner = Runner(settings)
    while runner.run_next():
        pass
    assert cogworker.status(everything) == "complete"
    assert cogworker.status(untracked) is None and cogworker.status(opted_out) is None


def test_unknown_and_expired_jids_read_as_none(r: redis.Redis, settings: Settings) -> None:
    cw_client.configure(load_settings(redis_url=settings.redis_url, status_ttl_s=0.3))
    assert cogworker.status("no-such-jid") is None
    jid = status_jobs.tracked.perform_async("f")
    assert jid is not None
    assert cogworker.status(jid) == "queued"
    wait_until(lambda: cogworker.status(jid) is None, timeout=5, message="the status to expire")


def test_a_scheduled_job_keeps_its_status_until_it_is_due(r: redis.Redis, configured: Settings) -> None:
    jid = status_jobs.tracked.perform_in(7200, "g")
    assert jid is not None
    assert cogworker.status(jid) == "queued"
    assert r.pttl(f"cogworker:status:{jid}") > 7200_000


def test_a_push_that_does_not_happen_leaves_no_status(r: redis.Redis, configured: Settings) -> None:
    def stop_everything(job: dict[str, Any], call_next: Any) -> None:
        return None

    cogworker.client_chain.add(stop_everything)
    assert status_jobs.tracked.perform_async("h") is None
    assert r.keys("cogworker:status:*") == []


def test_status_writes_failing_never_fail_the_job_or_the_push(private_redis: RedisServer) -> None:
    settings = load_settings(redis_url=private_redis.url)
    cw_client.configure(settings)
    jid = status_jobs.tracked.perform_async("i")
    assert jid is not None
    tracked = status_jobs.tracked
    job = cw_client.build_job(tracked.name, ("j",), {}, queue=tracked.queue, options=tracked.options, at=None)
    ran: list[str] = []

    private_redis.stop()
    with capture_logs() as logs:
        on_run(job, lambda: ran.append("ran"))  # working, complete: both writes fail
        with pytest.raises(ValueError, match="boom"):
            on_run(job, lambda: (_ for _ in ()).throw(ValueError("boom")))  # the job's own error only
        assert on_push(job, lambda pushed: pushed["jid"]) == job["jid"]
    assert ran == ["ran"]
    outage_lines = [e for e in logs if e.get("component") == "Status"]
    assert [e["event"] for e in outage_lines] == ["redis_outage_started"]

    private_redis.start()
    with capture_logs() as logs:
        on_run(job, lambda: ran.append("again"))
    assert [e["event"] for e in logs if e.get("component") == "Status"] == ["redis_outage_ended"]
    assert cogworker.status(job["jid"]) == "complete"


def test_redis_going_away_while_a_tracked_job_runs_does_not_fail_it(
    private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(redis_url=private_redis.url)
    cw_client.configure(settings)
    jid = status_jobs.tracked_hook.perform_async()
    raw = private_redis.client().rpop("cogworker:queue:default")
    assert jid is not None and raw is not None
    monkeypatch.setattr(status_jobs, "hook", private_redis.stop)
    parts = build(settings)
    settler = Settler(parts.ctx, "cogworker:inprogress:x")
    stats = Stats()
    with capture_logs() as logs:
        process(Work("default", raw), settler, stats, allowed=())  # "working" is written; "complete" can't be
    assert (stats.processed, stats.failed) == (1, 0)
    assert [e["event"] for e in logs if e.get("component") == "Status"] == ["redis_outage_started"]
    assert [e["event"] for e in logs if e["event"] in ("job_done", "job_fail")] == ["job_done"]
    private_redis.start()


def test_testing_modes_write_no_status_and_need_no_redis() -> None:
    cw_client.configure(load_settings(redis_url="redis://127.0.0.1:1/0", status_all=True))
    with testing.fake():
        jid = status_jobs.tracked.perform_async("k")
        assert jid is not None
        assert cogworker.status(jid) is None
        assert status_jobs.tracked.jobs[0].get("status") is True
        status_jobs.tracked.clear()
    with testing.inline():
        ran = status_jobs.never_tracked.perform_async("l")  # runs right here; writes to test:ran
        assert ran is not None and cogworker.status(ran) is None


def test_worker_processes_record_the_lifecycle(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    done = status_jobs.tracked.perform_async("m")
    flaky = status_jobs.tracked_flaky.perform_async("n")
    assert done is not None and flaky is not None
    worker = workers.start(COGWORKER_REQUIRE="status_jobs")
    wait_until(lambda: cogworker.status(done) == "complete", timeout=20, message="complete")
    wait_until(lambda: cogworker.status(flaky) == "retrying", timeout=20, message="retrying")
    wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="ready")
    assert worker.stop() == 0
