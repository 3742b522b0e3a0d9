"""`async def` jobs run by a real `cogworker run` worker: the body runs to completion on the
worker's event loop, failures follow the retry policy, the job's context reaches the coroutine,
at most COGWORKER_ASYNC_CONCURRENCY run at once, a stop requeues what is still running, and a job
that blocks the loop is logged with its stack."""

from __future__ import annotations

import json
import signal
from typing import Any

import async_jobs
import demo_jobs
import redis

import cogworker
from cogworker import push_bulk, status
from cogworker.api.backtrace import lines_of
from cogworker.ops import processes as process_ops
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.redis_server import wait_until
from tests.support.swarm import stays
from tests.support.workers import WorkerPool

APP = {"COGWORKER_REQUIRE": "async_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1"}


def test_an_async_job_runs_its_body_before_it_counts_as_processed(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """The regression: the coroutine was created, never awaited, and the job counted processed."""
    async_jobs.marker.perform_async("first")
    worker = workers.start(**APP)
    wait_until(lambda: r.llen("test:async") == 1, timeout=15, message="the async job's marker")
    assert r.lrange("test:async", 0, -1) == [f"first {worker.pid}"]
    # Counted processed only once it ran: the ack rides on a later fetch (or the stop's flush).
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=10, message="processed")
    assert r.get("cogworker:stat:failed") is None
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") == 0
    assert worker.stop() == 0
    assert "was never awaited" not in worker.log_text()


def test_every_way_of_pushing_reaches_the_loop(
    r: redis.Redis, configured: object, workers: WorkerPool, cli: CLI, monkeypatch: Any
) -> None:
    """perform_async, perform_in, perform_at, push_bulk and `cogworker enqueue` of an async job."""
    async_jobs.marker.perform_async("async")
    async_jobs.marker.perform_in(0.1, "in")
    async_jobs.marker.set(queue="default").perform_at(0, "at")
    push_bulk(async_jobs.marker, [("bulk1",), ("bulk2",)])
    monkeypatch.setenv("COGWORKER_REQUIRE", "async_jobs")
    assert cli("enqueue", "async_jobs.marker", '["cli"]').code == 0
    workers.start(**APP)
    wait_until(lambda: r.llen("test:async") == 6, timeout=15, message="six markers")
    tags = sorted(entry.split()[0] for entry in r.lrange("test:async", 0, -1))
    assert tags == ["async", "at", "bulk1", "bulk2", "cli", "in"]
    wait_until(lambda: r.get("cogworker:stat:processed") == "6", timeout=10, message="six processed")


def test_a_failing_coroutine_follows_the_retry_policy_to_dead(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = async_jobs.async_boom.perform_async("kaput")  # retry=1: one retry, then dead
    workers.start(**APP)
    [raw] = wait_until(lambda: r.zrange("cogworker:retry", 0, -1), timeout=15, message="the retry")
    entry = json.loads(raw)
    assert (entry["jid"], entry["error_class"], entry["error_message"]) == (jid, "ValueError", "kaput")
    assert any("async_boom" in line for line in lines_of(entry) or [])  # the coroutine's own frame
    r.zadd("cogworker:retry", {raw: 0}, xx=True)
    [dead] = wait_until(lambda: r.zrange("cogworker:dead", 0, -1), timeout=15, message="dead")
    assert json.loads(dead)["jid"] == jid and r.zcard("cogworker:retry") == 0
    assert r.get("cogworker:stat:failed") == "2"
    assert r.get("cogworker:stat:processed") is None


def test_a_sync_job_returning_a_coroutine_fails_with_a_type_error(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = async_jobs.returns_coroutine.perform_async("x")
    worker = workers.start(**APP)
    [raw] = wait_until(lambda: r.zrange("cogworker:retry", 0, -1), timeout=15, message="the retry")
    entry = json.loads(raw)
    assert entry["jid"] == jid and entry["error_class"] == "TypeError"
    assert entry["error_message"].startswith(
        "job async_jobs.returns_coroutine returned a coroutine; declare it"
    )
    assert r.llen("test:never") == 0
    assert worker.stop() == 0
    assert "never awaited" not in worker.log_text()  # the coroutine was closed, not left to warn


def test_the_jobs_context_reaches_the_coroutine(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """structlog's jid/job/queue and a contextvar set by plain sync server middleware are visible
    inside the coroutine, after an await, and on its log lines."""
    jids = [async_jobs.context_probe.perform_async(f"p{n}") for n in range(3)]
    worker = workers.start(**APP)
    wait_until(lambda: r.llen("test:ctx") == 3, timeout=15, message="three probes")
    seen = sorted(r.lrange("test:ctx", 0, -1))
    assert seen == sorted(
        f"p{n}|{jid}|async_jobs.context_probe|default|tenant-of-{jid}" for n, jid in enumerate(jids)
    )
    lines = wait_until(lambda: worker.events_named("inside_coroutine"), message="the job's log lines")
    assert len(lines) == 3 and {line["jid"] for line in lines} == set(jids)
    assert all(line["job"] == "async_jobs.context_probe" and line["queue"] == "default" for line in lines)


def test_async_jobs_run_beside_the_threads_up_to_the_async_concurrency(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """One job thread, three async slots: three jobs overlap on the loop, never a fourth."""
    push_bulk(async_jobs.span, [(f"j{n}", 0.4) for n in range(9)])
    worker = workers.start(**APP, COGWORKER_CONCURRENCY="1", COGWORKER_ASYNC_CONCURRENCY="3")
    wait_until(lambda: r.llen("test:spans") >= 3, timeout=15, message="three spans started")
    # The fetcher took jobs for its free slots only (plus the few job_mix.py lets wait): the rest
    # are still on the queue for other processes.
    assert r.llen("cogworker:queue:default") >= 4
    assert r.llen(f"cogworker:inprogress:{worker.identity()}") <= 5
    wait_until(lambda: r.llen("test:spans") == 18, timeout=20, message="nine spans")
    running = peak = 0
    for mark in r.lrange("test:spans", 0, -1):
        running += 1 if mark.startswith("+") else -1
        peak = max(peak, running)
    assert peak == 3
    wait_until(lambda: r.get("cogworker:stat:processed") == "9", timeout=10, message="nine processed")


def test_a_new_process_takes_only_the_sync_jobs_it_can_start(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """Async jobs registered, a backlog of long sync jobs, nothing fetched yet (a deploy, or a
    replacement for a killed process): the first fetch doesn't guess an even mix and take twice its
    threads (then 6 of 8 here, 4 of them held in memory while other processes could run them), and
    once the mix is known at most job_mix.py's hold waits (a tenth of the threads, plus one)."""
    push_bulk(demo_jobs.sleepy, [(f"s{n}", 1.5) for n in range(8)])
    worker = workers.start(
        COGWORKER_REQUIRE="async_jobs,demo_jobs", COGWORKER_CONCURRENCY="2", COGWORKER_ASYNC_CONCURRENCY="10"
    )
    wait_until(lambda: r.llen("test:started") == 2, timeout=15, message="two jobs started")
    in_progress = f"cogworker:inprogress:{worker.identity()}"
    queued = "cogworker:queue:default"
    stays(lambda: r.llen(in_progress) <= 3 and r.llen(queued) >= 5, 0.5, "at most one job held")
    wait_until(lambda: r.llen("test:ran") == 8, timeout=20, message="all eight ran")


def test_unique_and_status_work_for_an_async_job(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = async_jobs.unique_marker.perform_async("u")
    assert jid is not None and async_jobs.unique_marker.perform_async("u") is None  # a duplicate
    assert status(jid) == "queued"
    workers.start(**APP)
    wait_until(lambda: status(jid) == "complete", timeout=15, message="complete")
    assert r.lrange("test:async", 0, -1) == ["u"]
    assert async_jobs.unique_marker.perform_async("u") is not None  # the claim was released


def test_stop_cancels_a_running_async_job_past_the_timeout_and_requeues_it(
    r: redis.Redis, configured: object, workers: WorkerPool, cli: CLI
) -> None:
    """At-least-once: an async job still running at the stop's deadline is cancelled (its own
    cleanup runs), nothing is settled for it, and the next worker runs it again."""
    jid = async_jobs.slow_first.perform_async("long")
    first = workers.start(**APP, COGWORKER_TIMEOUT_S="1", COGWORKER_HEARTBEAT_INTERVAL_S="0.2")
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job started")
    identity = first.identity()

    # Busy while it runs: the heartbeat counts it and `cogworker status` shows it running.
    def running() -> list[dict[str, Any]]:
        found = [p for p in cli("status", "--json").json()["processes"] if p["identity"] == identity]
        return list(found[0]["running"]) if found else []

    [job] = wait_until(running, timeout=10, message="the job in `cogworker status`")
    assert (job["job"], job["jid"]) == ("async_jobs.slow_first", jid)
    [process] = cli("status", "--json").json()["processes"]
    assert process["busy"] == 1
    first.signal(signal.SIGTERM)
    assert first.proc.wait(timeout=15) == 0
    assert r.lrange("test:cancelled", 0, -1) == ["long"]
    assert r.llen(f"cogworker:inprogress:{identity}") == 0
    [raw] = r.lrange("cogworker:queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid
    assert r.get("cogworker:stat:processed") is None and r.get("cogworker:stat:failed") is None
    assert first.events_named("async_jobs_cancelled")[0]["count"] == 1

    second = workers.start(**APP)
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the second run")
    assert r.lrange("test:ran", 0, -1) == [f"long {second.pid}"]
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=10, message="processed once")


def test_quiet_lets_a_running_async_job_finish_and_fetches_no_other(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    async_jobs.nap.perform_async("running", 0.5)
    worker = workers.start(**APP)
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job started")
    worker.signal(signal.SIGTSTP)
    wait_until(lambda: worker.events_named("quieting"), timeout=5, message="quiet")
    jid = async_jobs.marker.perform_async("after quiet")
    # An idle fetcher would take it within milliseconds; the running job has most of its nap left.
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["running"], timeout=10, message="the running job")
    assert worker.stop() == 0
    assert r.llen("test:async") == 0
    [raw] = r.lrange("cogworker:queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid


def test_a_job_blocking_the_loop_is_logged_once_with_its_stack(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = async_jobs.hog.perform_async(1.5)
    worker = workers.start(**APP, COGWORKER_ASYNC_LAG_THRESHOLD_S="0.2")
    wait_until(lambda: worker.events_named("async_loop_unblocked"), timeout=15, message="the stall's end")
    [blocked] = worker.events_named("async_loop_blocked")
    assert (blocked["job"], blocked["jid"], blocked["queue"]) == ("async_jobs.hog", jid, "default")
    assert "time.sleep(seconds)" in blocked["stack"] and "in hog" in blocked["stack"]
    assert blocked["lag_s"] >= 0.2
    assert worker.events_named("async_loop_unblocked")[0]["blocked_s"] >= 1.0
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["hog"], timeout=10, message="the job ran")


def test_a_periodic_async_job_runs_on_its_slots(r: redis.Redis, workers: WorkerPool) -> None:
    workers.start(
        COGWORKER_REQUIRE="async_periodic",
        COGWORKER_POLL_INTERVAL_S="0.05",
        COGWORKER_PERIODIC_CHECK_INTERVAL_S="0.05",
    )
    wait_until(lambda: r.llen("test:periodic_async") >= 2, timeout=15, message="two slots run")
    assert r.hexists("cogworker:periodic:entries", "async_periodic.every_second_async")
    assert r.get("cogworker:stat:failed") is None


def test_a_process_with_async_jobs_shows_its_async_slots_beside_its_threads(
    r: redis.Redis, configured: object, workers: WorkerPool, cli: CLI
) -> None:
    with_async = workers.start(**APP, COGWORKER_CONCURRENCY="3", COGWORKER_ASYNC_CONCURRENCY="7")
    sync_only = workers.start(COGWORKER_CONCURRENCY="3", COGWORKER_ASYNC_CONCURRENCY="7")  # demo_jobs
    ids = {with_async.identity(), sync_only.identity()}
    live = wait_until(
        lambda: (
            {p.identity: p for p in process_ops.processes(r)} if len(process_ops.processes(r)) == 2 else None
        ),
        message="both processes live",
    )
    assert set(live) == ids
    assert live[with_async.identity()].capacity == "3+7 async" and live[with_async.identity()].slots == 10
    assert live[sync_only.identity()].capacity == "3" and live[sync_only.identity()].slots == 3
    shown = cli("status")
    assert "0/13 slots busy" in shown.out and "3+7 async" in shown.out


def test_an_async_job_with_a_rate_limiter_runs_one_at_a_time_on_a_bridge_thread(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """Its limiter is held around the body (sync Redis calls), so it takes the sync path on a bridge
    thread, its body on the loop: the limit holds and each run is settled once."""
    push_bulk(async_jobs.limited_span, [(f"l{n}",) for n in range(4)])
    workers.start(**APP, COGWORKER_ASYNC_CONCURRENCY="4")
    wait_until(lambda: r.llen("test:spans") == 8, timeout=30, message="four spans")
    running = peak = 0
    for mark in r.lrange("test:spans", 0, -1):
        running += 1 if mark.startswith("+") else -1
        peak = max(peak, running)
    assert peak == 1
    wait_until(lambda: r.get("cogworker:stat:processed") == "4", timeout=10, message="four processed")


def test_an_async_batch_member_sees_its_batch_and_is_counted(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    workers.start(**APP)
    with cogworker.batch("async members") as b:
        async_jobs.member.perform_async("m1")
        async_jobs.member.perform_async("m2")

    def counted() -> bool:
        found = cogworker.batch_status(b.bid)
        return found is not None and (found.total, found.pending, found.done) == (2, 0, 2)

    wait_until(counted, timeout=15, message="both members counted")
    assert sorted(r.lrange("test:members", 0, -1)) == [f"m1 {b.bid}", f"m2 {b.bid}"]
