"""`cogworker run` as a user runs it: queues, middleware, counters, stop, quiet, logs."""

from __future__ import annotations

import datetime as dt
import random
import signal
import time

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.settings import load_settings, parse_queues
from cogworker.store import keys
from cogworker.worker.fetching.fetch import queue_order
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


def test_weighted_order_favours_heavier_queues() -> None:
    spec = parse_queues("a:3,b:1")
    rng = random.Random(7)
    firsts = [queue_order(spec, rng)[0] for _ in range(4000)]
    share = firsts.count("a") / len(firsts)
    assert 0.70 < share < 0.80  # 3:1 -> a first 75% of the time
    assert queue_order(parse_queues("x,y,z"), rng) == ["x", "y", "z"]


def test_strict_order_drains_the_first_queue_first(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    for i in range(5):
        demo_jobs.on_other.perform_async(str(i))
        demo_jobs.record.perform_async(str(i))
    workers.start(COGWORKER_QUEUES="other,default", COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:ran") == 10, timeout=15, message="10 jobs")
    ran = r.lrange("test:ran", 0, -1)
    assert all(item.startswith("other:") for item in ran[:5]), ran


def test_server_middleware_wraps_every_job(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    demo_jobs.record.perform_async("x")
    workers.start(COGWORKER_REQUIRE="mw_app")
    wait_until(lambda: r.llen("test:mw") == 2, timeout=15, message="middleware to run")
    assert r.lrange("test:mw", 0, -1) == ["before demo_jobs.record", "after demo_jobs.record"]


def test_counters_total_and_per_day(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    for i in range(3):
        demo_jobs.record.perform_async(str(i))
    demo_jobs.boom_once.perform_async("no")
    worker = workers.start()
    wait_until(
        lambda: r.get("cogworker:stat:failed") == "1" and r.get("cogworker:stat:processed") == "3",
        timeout=15,
        message="counters",
    )
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    assert r.get(f"cogworker:stat:processed:{day}") == "3"
    assert r.get(f"cogworker:stat:failed:{day}") == "1"
    assert worker.stop() == 0


def test_job_log_lines_carry_context_and_elapsed(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = demo_jobs.record.perform_async("logged")
    worker = workers.start()
    wait_until(lambda: worker.events_named("job_done"), timeout=15, message="a job_done line")
    assert worker.stop() == 0
    [start] = worker.events_named("job_start")
    [done] = worker.events_named("job_done")
    for line in (start, done):
        assert line["jid"] == jid
        assert line["job"] == "demo_jobs.record"
        assert line["queue"] == "default"
        assert line["pid"] == worker.pid
        assert line["identity"].split(":")[1] == str(worker.pid)
    assert isinstance(done["elapsed_ms"], float)


def test_term_stops_within_timeout_and_requeues_unfinished(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    demo_jobs.sleepy.perform_async("long", 60)
    worker = workers.start(COGWORKER_TIMEOUT_S="1")
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job to start")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0
    assert time.monotonic() - started < 4
    [raw] = r.lrange("cogworker:queue:default", 0, -1)
    assert '"long"' in raw
    assert r.keys("cogworker:inprogress:*") == []
    assert worker.events_named("hard_shutdown")


def test_term_lets_short_jobs_finish(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    demo_jobs.sleepy.perform_async("short", 0.5)
    worker = workers.start(COGWORKER_TIMEOUT_S="10")
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job to start")
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=15) == 0
    assert r.llen("test:ran") == 1
    assert r.llen("cogworker:queue:default") == 0
    assert r.get("cogworker:stat:processed") == "1"


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTSTP])
def test_quiet_stops_fetching_but_finishes_running_jobs(
    r: redis.Redis, configured: object, workers: WorkerPool, signum: int
) -> None:
    demo_jobs.sleepy.perform_async("running", 1)
    worker = workers.start(COGWORKER_HEARTBEAT_INTERVAL_S="0.2")
    wait_until(lambda: r.llen("test:started") == 1, timeout=15, message="the job to start")
    worker.signal(signum)
    wait_until(lambda: worker.events_named("quieting"), timeout=5, message="quiet")
    demo_jobs.record.perform_async("after-quiet")
    wait_until(lambda: r.llen("test:ran") == 1, timeout=10, message="the running job to finish")
    wait_until(
        lambda: r.hget(f"cogworker:process:{worker.identity()}", "quiet") == "1",
        timeout=10,
        message="quiet in the heartbeat",
    )
    assert r.llen("cogworker:queue:default") == 1  # not fetched while quiet
    # A remote resume (through the heartbeat) undoes it.
    identity = worker.identity()
    r.lpush(f"cogworker:signals:{identity}", "resume")
    wait_until(lambda: r.llen("test:ran") == 2, timeout=15, message="the job after resume")
    assert worker.stop() == 0


def test_a_quiet_worker_still_acknowledges_jobs_that_finish(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """While quiet, the fetcher fetches nothing, but a job that finishes is still acknowledged (off
    the in-progress list, counted) while its neighbour runs on."""
    demo_jobs.sleepy.perform_async("short", 0.5)
    demo_jobs.sleepy.perform_async("long", 8)
    worker = workers.start(COGWORKER_CONCURRENCY="2")
    wait_until(lambda: r.llen("test:started") == 2, timeout=15, message="both jobs to start")
    worker.signal(signal.SIGUSR1)
    wait_until(lambda: worker.events_named("quieting"), timeout=5, message="quiet")
    identity = worker.identity()
    wait_until(lambda: r.get("cogworker:stat:processed") == "1", timeout=5, message="the short job's ack")
    assert r.llen("test:ran") == 1  # the long job is still running
    assert r.llen(f"cogworker:inprogress:{identity}") == 1
    worker.kill()  # not worth waiting out the long job


def test_term_while_idle_on_one_queue_stops_at_once_and_leaves_later_jobs_queued(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """With one queue an idle job thread itself blocks on it (BLMOVE); a stop must not wait on it
    for long, nor take a job pushed as it stops."""
    worker = workers.start()
    wait_until(
        lambda: any(c.get("cmd") == "blmove" for c in r.client_list()),
        timeout=15,
        message="a thread blocked on the queue",
    )
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0
    assert time.monotonic() - began < 5
    demo_jobs.record.perform_async("after-stop")
    assert r.llen("cogworker:queue:default") == 1
    assert r.llen("test:ran") == 0


def test_an_idle_multi_queue_worker_waits_on_the_wake_channel(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    worker = workers.start(COGWORKER_QUEUES="default,other")
    wait_until(
        lambda: r.pubsub_numsub("cogworker:wake") == [("cogworker:wake", 1)],
        timeout=15,
        message="the idle fetcher to subscribe",
    )
    demo_jobs.on_other.perform_async("woken")
    demo_jobs.record.perform_async("woken-too")
    wait_until(lambda: r.llen("test:ran") == 2, timeout=10, message="both jobs")
    assert worker.stop() == 0
    assert r.pubsub_numsub("cogworker:wake") == [("cogworker:wake", 0)]


def test_term_during_a_slow_app_import_is_a_clean_stop(tmp_path, r: redis.Redis, workers: WorkerPool) -> None:
    marker = tmp_path / "importing"
    worker = workers.start(
        COGWORKER_REQUIRE="slow_import_app", SLOW_IMPORT_MARKER=str(marker), SLOW_IMPORT_SECONDS="1.5"
    )
    wait_until(marker.exists, timeout=15, message="the app import to begin")
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=15) == 0
    assert r.keys("cogworker:process:*") == []


def test_remote_commands_apply_in_the_order_they_were_sent(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    """`cogworker quiet` then `cogworker resume`, both before the worker's next beat: it ends
    resumed (the commands were delivered newest first, so a resume sent right after a quiet left
    the worker quiet)."""
    worker = workers.start(COGWORKER_HEARTBEAT_INTERVAL_S="0.2")
    identity = wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="ready")[0][
        "identity"
    ]
    # What `cogworker quiet` then `cogworker resume` write, in one step so no beat falls between.
    pipe = r.pipeline(transaction=True)
    for command in ("quiet", "resume"):
        pipe.lpush(keys.signals(identity), command)
    pipe.execute()
    wait_until(lambda: len(worker.events_named("remote_command")) == 2, timeout=10, message="both commands")
    assert [e["command"] for e in worker.events_named("remote_command")] == ["quiet", "resume"]
    wait_until(lambda: r.hget(keys.process(identity), "quiet") == "0", timeout=5, message="a resumed beat")
    demo_jobs.record.perform_async("after-resume")
    wait_until(lambda: r.llen("test:ran") == 1, timeout=10, message="a job after the resume")
    assert worker.stop() == 0


def test_a_remote_command_survives_a_lost_heartbeat_reply(workers: WorkerPool) -> None:
    """The beat that takes a remote command can lose its reply (Redis stalled past the timeout and
    ran it anyway): the command must still reach the worker."""
    server = RedisServer(extra=("--enable-debug-command", "yes"))
    try:
        r = server.client()
        worker = workers.start(
            server.url, COGWORKER_REDIS_TIMEOUT_S="1", COGWORKER_HEARTBEAT_INTERVAL_S="0.2"
        )
        identity = wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="ready")[0][
            "identity"
        ]
        wait_until(lambda: r.hget(keys.process(identity), "quiet") == "0", timeout=10, message="a beat")
        # The stall ends with the command pushed, before the beats sent (and given up on) meanwhile.
        stalling = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True, socket_timeout=15)
        pipe = stalling.pipeline(transaction=False)
        pipe.execute_command("DEBUG", "SLEEP", 3)
        pipe.lpush(keys.signals(identity), "quiet")
        pipe.execute()
        stalling.close()
        wait_until(lambda: worker.events_named("quieting"), timeout=10, message="the quiet to arrive")
        wait_until(lambda: r.hget(keys.process(identity), "quiet") == "1", timeout=5, message="a quiet beat")
        assert worker.events_named("redis_outage_started"), "the stall should have cost the worker a reply"
        assert worker.stop() == 0
    finally:
        server.close()


def test_wake_ups_that_pile_up_while_busy_are_drained(workers: WorkerPool) -> None:
    """A busy worker reading several queues doesn't wait on its wake-up channel, and pushes keep
    publishing to it: unread, the messages grew in Redis's output buffer until Redis cut the
    subscriber (logged as a fetch outage). A small pubsub buffer limit shows it in seconds."""
    server = RedisServer(extra=("--client-output-buffer-limit", "pubsub 0 64kb 2"))
    try:
        r = server.client()
        cogworker.configure(load_settings(redis_url=server.url))
        worker = workers.start(server.url, COGWORKER_QUEUES="default,other", COGWORKER_CONCURRENCY="1")
        wait_until(
            lambda: r.pubsub_numsub(keys.WAKE_CHANNEL) == [(keys.WAKE_CHANNEL, 1)], timeout=15, message="idle"
        )
        demo_jobs.sleepy.perform_async("busy", 6)
        wait_until(lambda: r.llen("test:started") == 1, timeout=10, message="the long job to start")
        # 2.5 MB a second of messages for 4 s (big ones: the kernel's socket buffers take the
        # first few MB before Redis's own buffer grows).
        for _ in range(40):
            pipe = r.pipeline(transaction=False)
            for _ in range(25):
                pipe.publish(keys.WAKE_CHANNEL, "x" * 10_000)
            pipe.execute()
            time.sleep(0.1)  # pacing the load, not waiting for anything
        wait_until(lambda: r.llen("test:ran") == 1, timeout=10, message="the long job to end")
        demo_jobs.on_other.perform_async("after")
        wait_until(lambda: "other:after" in r.lrange("test:ran", 0, -1), timeout=10, message="a later job")
        assert worker.events_named("redis_outage_started") == []
        assert worker.stop() == 0
    finally:
        server.close()
