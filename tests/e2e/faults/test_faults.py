"""Fault tests with real `cogworker run` processes and real Redis servers: something real breaks,
and no job is lost."""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool

# Recovery within seconds, and a poller that looks often.
QUICK = {**QUICK_RECOVERY, "COGWORKER_POLL_INTERVAL_S": "0.2"}


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_sigkill_with_jobs_in_flight_loses_nothing(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    for i in range(6):
        demo_jobs.sleepy.perform_async(f"j{i}", 1.5)
    victim = workers.start(COGWORKER_CONCURRENCY="6", **QUICK)
    wait_until(lambda: r.llen("test:started") == 6, timeout=15, message="6 jobs in flight")
    victim.signal(signal.SIGKILL)
    victim.proc.wait(timeout=5)
    assert r.llen("test:ran") == 0
    survivor = workers.start(**QUICK)
    wait_until(lambda: r.llen("test:ran") == 6, timeout=20, message="every job to run again")
    ran = sorted(item.split()[0] for item in r.lrange("test:ran", 0, -1))
    assert ran == [f"j{i}" for i in range(6)]
    assert all(item.split()[1] == str(survivor.pid) for item in r.lrange("test:ran", 0, -1))
    assert survivor.events_named("requeued_orphans")[0]["moved"] == 6
    wait_until(lambda: r.keys("cogworker:inprogress:*") == [], timeout=5, message="empty lists")
    assert r.keys("cogworker:orphanings:*") == []  # acknowledged: counters cleared


def test_a_job_that_keeps_killing_its_process_ends_in_dead(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = demo_jobs.kill_me.perform_async("pill")
    # A recoverer that reads another queue: it only requeues the pill's dead processes' lists.
    recoverer = workers.start(COGWORKER_QUEUES="other", COGWORKER_MAX_ORPHANINGS="1", **QUICK)
    for death in range(2):
        victim = workers.start(COGWORKER_MAX_ORPHANINGS="1", **QUICK)
        assert victim.proc.wait(timeout=15) == -signal.SIGKILL
        assert r.llen("test:started") == death + 1
        if death == 0:
            # With a limit of 1 its first orphaning makes it a suspect, which the next worker runs alone.
            wait_until(lambda: r.llen(keys.suspects("default")) == 1, timeout=15, message="requeued once")

    def completed_dead_entry() -> dict[str, str] | None:
        entries = [json.loads(e) for e in r.zrange("cogworker:dead", 0, -1)]
        return entries[0] if len(entries) == 1 and "error_class" in entries[0] else None

    dead = wait_until(completed_dead_entry, timeout=15, message="the pill in dead with its error")
    assert dead["jid"] == jid
    assert dead["error_class"] == "cogworker.ProcessDied"
    assert r.llen("cogworker:queue:default") == 0
    # The recoverer logs the burial just after the script that wrote the entry returns: the line may
    # reach its log a moment after the entry is visible here.
    wait_until(lambda: recoverer.events_named("poison_pill_to_dead"), timeout=10, message="the burial logged")


def test_a_stopped_process_within_the_threshold_keeps_its_jobs(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    slow = dict(QUICK, COGWORKER_ORPHAN_THRESHOLD_S="6")
    demo_jobs.sleepy.perform_async("only-once", 1.0)
    owner = workers.start(**slow)
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job to start")
    watcher = workers.start(COGWORKER_QUEUES="other", **slow)
    identity = owner.identity()
    wait_until(lambda: r.exists(keys.process(identity)), timeout=5, message="the owner's heartbeat")
    owner.signal(signal.SIGSTOP)
    # Longer than the presence TTL (1 s), shorter than the orphan threshold (6 s).
    wait_until(lambda: not r.exists(keys.process(identity)), timeout=10, message="presence to expire")
    deadline = time.monotonic() + 2.5
    wait_until(
        lambda: time.monotonic() > deadline and watcher.events_named("worker_ready"),
        timeout=10,
        message="the watcher to have checked for orphans",
    )
    owner.signal(signal.SIGCONT)
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the job to finish")
    assert watcher.events_named("requeued_orphans") == []
    assert r.llen("test:started") == 1  # no second copy ran
    assert r.llen("cogworker:queue:default") == 0


def outage_lines(events: list[dict[str, object]]) -> dict[tuple[str, str], int]:
    counted: collections.Counter[tuple[str, str]] = collections.Counter()
    for e in events:
        if e.get("event") in ("redis_outage_started", "redis_outage_ended"):
            counted[(str(e["component"]), str(e["event"]))] += 1
    return dict(counted)


def assert_two_lines_per_component(events: list[dict[str, object]], *, required: bool = True) -> set[str]:
    counted = outage_lines(events)
    components = {c for c, _ in counted}
    assert components or not required, "no outage was logged"
    for component in components:
        assert counted.get((component, "redis_outage_started")) == 1, counted
        assert counted.get((component, "redis_outage_ended")) == 1, counted
    return components


@pytest.mark.parametrize("outage_s", [0.0, 10.0], ids=["restart", "unreachable-10s"])
def test_redis_outage_loses_nothing_and_kills_no_thread(
    tmp_path: Path, workers: WorkerPool, outage_s: float
) -> None:
    server = RedisServer(persistent=True)
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        out = tmp_path / "ran.txt"
        for i in range(12):
            demo_jobs.to_file.perform_async(str(out), f"j{i}", 0.4)
        demo_jobs.fail_later.perform_async(1.0)
        worker = workers.start(server.url, COGWORKER_CONCURRENCY="3", **QUICK)
        wait_until(lambda: len(lines(out)) >= 2, timeout=15, message="jobs to be running")
        server.stop()
        down_since = time.monotonic()
        wait_until(
            lambda: (
                time.monotonic() - down_since >= outage_s
                and (outage_s == 0 or worker.events_named("redis_outage_started"))
            ),
            timeout=outage_s + 10,
            interval=0.05,
            message="the outage to last",
        )
        server.start()
        wait_until(lambda: len(lines(out)) >= 24, timeout=30, message="every job to run")
        r = server.client()
        wait_until(lambda: r.zcard("cogworker:dead") == 1, timeout=15, message="the failure to be filed")
        wait_until(lambda: r.get("cogworker:stat:processed") == "12", timeout=15, message="acks")
        tags = [line for line in lines(out) if line.startswith("j")]
        assert sorted(tags, key=lambda t: int(t[1:])) == [f"j{i}" for i in range(12)]  # each exactly once
        # No thread died: new work still runs, scheduled work still graduates, the heartbeat still beats.
        demo_jobs.to_file.perform_async(str(out), "after")
        demo_jobs.to_file.perform_in(0.5, str(out), "scheduled-after")
        wait_until(lambda: {"after", "scheduled-after"} <= set(lines(out)), timeout=15, message="later jobs")
        identity = worker.identity()
        wait_until(lambda: r.exists(keys.process(identity)), timeout=5, message="the heartbeat")
        assert worker.stop() == 0
        if outage_s:
            components = assert_two_lines_per_component(worker.events())
            assert {"Fetch", "Heartbeat"} <= components
        else:
            # A quick restart may pass unnoticed; whatever noticed it logs one start and one end.
            assert_two_lines_per_component(worker.events(), required=False)
        assert r.keys("cogworker:inprogress:*") == []
    finally:
        server.close()


def test_wrong_type_keys_are_quarantined_and_work_goes_on(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    r.set("cogworker:retry", "oops")
    r.hset("cogworker:queue:other", "not", "a list")
    r.sadd("cogworker:queues", "other")
    demo_jobs.record.perform_async("default-job")
    worker = workers.start(COGWORKER_QUEUES="default,other", **QUICK)
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the good job")
    quarantined = wait_until(
        lambda: r.keys("cogworker:quarantine:*") if len(r.keys("cogworker:quarantine:*")) == 2 else None,
        timeout=15,
        message="two quarantined keys",
    )
    assert all(r.ttl(k) > 0 for k in quarantined)
    assert r.type("cogworker:retry") == "none"
    demo_jobs.on_other.perform_async("after-guard")
    wait_until(lambda: r.llen("test:ran") == 2, timeout=15, message="the job on the mended queue")
    assert len(worker.events_named("wrong_type_key_quarantined")) == 2
    assert worker.stop() == 0


def test_refused_lmove_falls_back_to_basic_fetch_with_one_warning(
    tmp_path: Path, workers: WorkerPool
) -> None:
    server = RedisServer(extra=("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", ""))
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        out = tmp_path / "ran.txt"
        for i in range(3):
            demo_jobs.to_file.perform_async(str(out), f"j{i}")
        worker = workers.start(server.url)
        wait_until(lambda: len(lines(out)) == 6, timeout=15, message="jobs to run on basic fetch")
        demo_jobs.to_file.perform_async(str(out), "later")
        wait_until(lambda: "later" in lines(out), timeout=15, message="a later job")
        assert len(worker.events_named("reliable_fetch_unsupported")) == 1
        assert worker.stop() == 0
    finally:
        server.close()


def test_failures_on_basic_fetch_reach_retry_and_dead(workers: WorkerPool) -> None:
    """Basic fetch keeps no in-progress list, so a failure's filing must not wait for a removal from
    one: the job that will be retried is in retry, the one that won't is in dead, both counted."""
    server = RedisServer(extra=("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", ""))
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        r = server.client()
        worker = workers.start(server.url)
        # Pushed once the worker has fallen back (its first wait on the queue is refused), so they
        # are popped by BRPOP, not moved onto an in-progress list by the fetch script.
        wait_until(lambda: worker.events_named("reliable_fetch_unsupported"), timeout=30, message="fallback")
        demo_jobs.boom.perform_async("to retry")
        demo_jobs.boom_once.perform_async("to dead")
        wait_until(
            lambda: r.zcard(keys.RETRY) == 1 and r.zcard(keys.DEAD) == 1, timeout=15, message="filings"
        )
        assert "to retry" in r.zrange(keys.RETRY, 0, -1)[0]
        assert "to dead" in r.zrange(keys.DEAD, 0, -1)[0]
        assert r.get(keys.STAT_FAILED) == "2"
        assert len(worker.events_named("reliable_fetch_unsupported")) == 1
        assert worker.stop() == 0
    finally:
        server.close()


def test_killing_the_worker_process_group_is_clean(workers: WorkerPool) -> None:
    """The harness itself: a stopped worker leaves no process behind."""
    worker = workers.start()
    wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="ready")
    assert worker.stop() == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(worker.pid, 0)
