"""`cogworker.cancel` of jobs real `cogworker run` workers hold: a running `async def` job's task is
cancelled, a running sync job sees `current_job().cancelled` and ends at its next check, a job that
reaches a worker already knowing of its cancel never starts (fetched after the cancel, or loaded at
the worker's start), and a job cancelled while its process dies is not run again after orphan
recovery. Each ends counted `cancelled`: not failed, not retried, not in dead, off the in-progress
list, its unique claim released."""

from __future__ import annotations

import signal
import time

import cancel_jobs
import pytest
import redis

import cogworker
from cogworker import codec
from cogworker.store import keys
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

APP = {
    "COGWORKER_REQUIRE": "cancel_jobs",
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.2",
    "COGWORKER_POLL_INTERVAL_S": "0.2",
}
# Short thresholds so orphan recovery runs within seconds.
QUICK_RECOVERY = {
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "0.3",
}


def shown_running(r: redis.Redis, jid: str) -> bool:
    """The job is in some live process's work hash (what `cancel` reads to say "running")."""
    return any(jid in value for key in r.keys(keys.WORK_PREFIX + "*") for value in r.hvals(key))


def counted_cancelled(r: redis.Redis, count: int = 1) -> bool:
    return int(r.get(keys.stat("cancelled")) or 0) == count


def assert_ended_cancelled(r: redis.Redis, worker: Worker, jid: str) -> None:
    wait_until(lambda: counted_cancelled(r), timeout=15, message="counted cancelled")
    wait_until(lambda: r.llen(keys.in_progress(worker.identity())) == 0, timeout=10, message="acknowledged")
    assert r.get(keys.STAT_FAILED) is None
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0
    ended = wait_until(lambda: worker.events_named("job_cancelled"), timeout=5, message="job_cancelled")
    assert [event["jid"] for event in ended] == [jid]


def test_a_running_async_job_is_cancelled_on_the_loop(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = cancel_jobs.async_sleeper.set(status=True, result_ttl=60).perform_async("a1")
    worker = workers.start(**APP)
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job to start")
    wait_until(lambda: shown_running(r, jid), timeout=10, message="the job shown running")
    started = time.monotonic()
    outcome = cogworker.cancel(jid)
    assert (outcome.case, outcome.stopped, outcome.job) == ("running", True, "cancel_jobs.async_sleeper")
    assert outcome.processes == [worker.identity()]
    wait_until(lambda: r.lrange("test:ended", 0, -1), timeout=10, message="the task to end")
    assert r.lrange("test:ended", 0, -1) == ["a1 task cancelled"]
    assert time.monotonic() - started < 5  # cancelled, not slept out (30 s)
    assert_ended_cancelled(r, worker, jid)
    assert cogworker.status(jid) == "cancelled"
    assert r.get("test:runs:a1") == "1"
    # A job that keeps its result ends its waiter: its end is the result.
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(jid, timeout=5)
    assert failed.value.error_class == "cogworker.JobCancelled"


def test_a_running_sync_job_sees_the_cancel_at_its_next_check(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = cancel_jobs.unique_cooperative.set(status=True).perform_async("s1")
    assert jid is not None and len(r.keys(keys.UNIQUE_PREFIX + "*")) == 1
    worker = workers.start(**APP)
    wait_until(lambda: shown_running(r, jid), timeout=15, message="the job shown running")
    assert cogworker.cancel(jid).case == "running"
    wait_until(lambda: r.lrange("test:ended", 0, -1), timeout=10, message="the job to end")
    assert r.lrange("test:ended", 0, -1) == ["s1 saw JobCancelled"]
    assert_ended_cancelled(r, worker, jid)
    assert cogworker.status(jid) == "cancelled"
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []  # the claim is released
    assert worker.events_named("job_cancel_requested")[0]["jid"] == jid
    assert worker.stop() == 0
    assert r.get("test:runs:s1") == "1"


def test_a_sync_job_that_never_checks_runs_on_with_its_flag_set(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """Cooperative: a job that never checks finishes; it saw `cancelled` become true."""
    jid = cancel_jobs.stubborn.perform_async("n1", 1.5)
    workers.start(**APP)
    wait_until(lambda: shown_running(r, jid), timeout=15, message="the job shown running")
    assert cogworker.cancel(jid).case == "running"
    wait_until(lambda: r.lrange("test:ended", 0, -1), timeout=10, message="the job to end")
    assert r.lrange("test:ended", 0, -1) == ["n1 finished cancelled=True"]
    wait_until(lambda: r.get(keys.STAT_PROCESSED) == "1", timeout=10, message="processed")
    assert counted_cancelled(r, 0)


def payload(jid: str, tag: str) -> str:
    return codec.dumps(
        {"class": "cancel_jobs.record", "args": [tag], "kwargs": {}, "jid": jid, "queue": "default"}
    )


def test_a_job_reaching_a_worker_that_knows_of_its_cancel_never_starts(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """Cancelled while nowhere to be found (in between places), then handed to workers: one started
    after the cancel (it reads the record before its first fetch) and one already running (it reads
    the record each second). Neither runs it."""
    assert cogworker.cancel("early01").case == "not_found"
    r.lpush(keys.queue("default"), payload("early01", "early"))
    r.sadd(keys.QUEUES, "default")
    booted = workers.start(**APP)
    wait_until(lambda: counted_cancelled(r), timeout=15, message="the first counted cancelled")
    # The count is written before the log line: wait for the line rather than read the log at once.
    ended = wait_until(lambda: booted.events_named("job_cancelled"), timeout=5, message="job_cancelled")
    assert [e["jid"] for e in ended] == ["early01"]

    assert cogworker.cancel("late01").case == "not_found"
    wait_until(lambda: len(booted.events_named("cancels_read")) == 2, timeout=10, message="the cancel read")
    r.lpush(keys.queue("default"), payload("late01", "late"), payload("ok01", "ok"))
    r.publish(keys.WAKE_CHANNEL, "default")  # as a push does: an idle fetcher fetches at once
    wait_until(lambda: counted_cancelled(r, 2), timeout=15, message="the second counted cancelled")
    wait_until(lambda: r.lrange("test:ended", 0, -1), timeout=10, message="the other job to run")
    assert r.lrange("test:ended", 0, -1) == ["ok finished"]
    assert r.get("test:runs:early") is None and r.get("test:runs:late") is None
    wait_until(lambda: r.llen(keys.in_progress(booted.identity())) == 0, timeout=10, message="acked")
    assert r.llen(keys.queue("default")) == 0


def test_a_job_cancelled_while_its_process_dies_is_not_run_again(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = cancel_jobs.stubborn.perform_async("crash", 60)
    victim = workers.start(**APP, **QUICK_RECOVERY)
    wait_until(lambda: shown_running(r, jid), timeout=15, message="the job shown running")
    victim_identity = victim.identity()
    survivor = workers.start(**APP, **QUICK_RECOVERY)
    survivor.identity()  # ready: it reads the record each second from now on
    assert cogworker.cancel(jid).case == "running"
    wait_until(lambda: victim.events_named("job_cancel_requested"), timeout=10, message="flagged")
    wait_until(lambda: survivor.events_named("cancels_read"), timeout=10, message="survivor read it")
    victim.signal(signal.SIGKILL)
    victim.proc.wait(timeout=5)
    # Orphan recovery finds it in the cancel record: taken off the dead process's list, not requeued.
    dropped = wait_until(
        lambda: survivor.events_named("cancelled_job_not_requeued"), timeout=20, message="orphan recovery"
    )
    assert [e["jid"] for e in dropped] == [jid]
    assert counted_cancelled(r)
    assert r.llen(keys.in_progress(victim_identity)) == 0
    assert r.llen(keys.queue("default")) == 0
    assert r.get("test:runs:crash") == "1"  # it never ran again
    assert survivor.events_named("requeued_orphans") == []
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0


def test_no_redis_command_per_job(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    """Workers read the cancel record once a second, whatever the job rate: 500 jobs cost no more
    ZRANGEBYSCOREs than the seconds they took (the poller, at one poll a minute here, adds two)."""

    def reads() -> int:
        stats = r.info("commandstats").get("cmdstat_zrangebyscore", {})
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0

    worker = workers.start(
        **{**APP, "COGWORKER_POLL_INTERVAL_S": "60", "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "60"}
    )
    worker.identity()
    before, started = reads(), time.monotonic()
    cogworker.push_bulk(cancel_jobs.record, [(f"b{n}",) for n in range(500)])
    wait_until(lambda: r.llen("test:ended") == 500, timeout=60, message="500 jobs run")
    wait_until(lambda: reads() > before, timeout=5, message="the watch's next read")  # it does read
    elapsed = time.monotonic() - started
    assert reads() - before <= elapsed / 1.0 + 4
