"""Children dying: killed mid-job, hung, crash-looping, outliving the stop deadline."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker import codec, exitcodes
from cogworker.api import payload
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, stays, swarm_runner

pytestmark = pytest.mark.slow


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def started(r: redis.Redis, tag: str) -> list[int]:
    """Pids that started the job tagged `tag` (demo_jobs.sleepy records them)."""
    return [int(line.split()[1]) for line in r.lrange("test:started", 0, -1) if line.split()[0] == tag]


def ran(r: redis.Redis, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in r.lrange("test:ran", 0, -1) if line.split()[0] == tag]


def jids_on_queue(r: redis.Redis, queue: str = "default") -> list[str]:
    import json

    return [json.loads(raw)["jid"] for raw in r.lrange(f"cogworker:queue:{queue}", 0, -1)]


def at(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(event["timestamp"]).timestamp()


def test_sigkilled_child_mid_job_is_requeued_within_a_second_and_completes(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_CONCURRENCY="1")
    swarm.wait_ready()
    jid = demo_jobs.sleepy.perform_async("k", 0.5)
    victim = wait_until(lambda: started(r, "k"), message="the job to start")[0]

    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(started(r, "k")) == 2, timeout=1.0, message="the job to run again within 1 s")
    assert time.monotonic() - killed_at < 1.0
    assert r.get(f"cogworker:orphanings:{jid}") == "1"  # counted (poison pills end in dead)
    wait_until(lambda: ran(r, "k"), message="the requeued job to complete")
    assert victim not in ran(r, "k")
    # The acknowledgement that clears the counter rides on the worker's next fetch, a moment after
    # the job body recorded its run: wait for it rather than race it.
    wait_until(
        lambda: r.get(f"cogworker:orphanings:{jid}") is None, message="the ack to clear the orphan counter"
    )

    exited = swarm.wait_event("child_exited", child_pid=victim)[0]
    assert exited["reason"] == "signal" and exited["signal"] == "SIGKILL" and exited["requeue"]
    assert (
        swarm.supervisor_events("child_jobs_requeued", child_identity=swarm.identities()[victim])[0]["moved"]
        == 1
    )
    swarm.wait_ready()  # the slot was respawned
    assert victim not in swarm.current_children().values()
    assert swarm.stop() == exitcodes.OK  # the crash was handled; the stop itself was clean
    assert r.keys("cogworker:inprogress:*") == []


def test_hung_child_is_killed_requeued_and_replaced(swarms: SwarmRunner, r: redis.Redis, configured) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_CONCURRENCY="1", COGWORKER_LIVENESS_TIMEOUT_S="2")
    swarm.wait_ready()
    demo_jobs.sleepy.perform_async("h", 1.0)
    victim = wait_until(lambda: started(r, "h"), message="the job to start")[0]
    os.kill(victim, signal.SIGSTOP)  # alive, but silent

    hung = swarm.wait_event("child_hung", child_pid=victim)[0]
    assert hung["silent_s"] >= 2
    exited = swarm.wait_event("child_exited", child_pid=victim)[0]
    assert exited["reason"] == "hung" and exited["requeue"]
    wait_until(lambda: ran(r, "h"), message="the job to run again elsewhere")
    assert ran(r, "h") != [victim]
    swarm.wait_ready()
    assert swarm.stop() == exitcodes.OK


def test_respawn_backoff_doubles_while_a_slot_dies_young_and_resets_after_a_healthy_run(
    swarms: SwarmRunner, r: redis.Redis
) -> None:
    # Each child pops its fate: four young deaths, a healthy run (> HEALTHY_UPTIME_S), a young death.
    r.rpush("test:crash_plan", 0.05, 0.05, 0.05, 0.05, 1.6, 0.05)
    swarm = swarms.start(
        COGWORKER_COUNT="1",
        COGWORKER_REQUIRE="demo_jobs,swarm_crash",
        COGWORKER_HEALTHY_UPTIME_S="1.2",
        COGWORKER_RESPAWN_BASE_DELAY_S="0.3",
        COGWORKER_RESPAWN_MAX_DELAY_S="0.6",
    )
    scheduled = swarm.wait_event("respawn_scheduled", count=6, timeout=20)
    assert [e["delay_s"] for e in scheduled] == [0, 0.3, 0.6, 0.6, 0, 0.3]
    assert [e["streak"] for e in scheduled] == [1, 2, 3, 4, 1, 2]
    swarm.wait_ready()
    assert r.llen("test:crash_plan") == 0

    # The delays were honoured: each respawn came no sooner than scheduled, and not much later (the
    # fork itself took 0.76 s once on a machine loaded by three test streams and other work).
    exits = swarm.supervisor_events("child_exited")
    starts = swarm.supervisor_events("child_started")[1:]
    assert [e["reason"] for e in exits] == ["crash"] * 6 and all(e["exit_code"] == 7 for e in exits)
    for exit_event, start_event, plan in zip(exits, starts, scheduled, strict=True):
        gap = at(start_event) - at(exit_event)
        assert plan["delay_s"] - 0.05 <= gap <= plan["delay_s"] + 1.0, (plan, gap)
    assert swarm.stop() == exitcodes.OK


def test_stragglers_are_killed_at_the_graceful_deadline_and_their_jobs_requeued(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    # A child's own drain ends after 1 s, before the swarm's deadline (1.5 s; settings refuse it
    # shorter). These children hang (stopped), so they never drain: killed at the deadline.
    swarm = swarms.start(
        COGWORKER_CONCURRENCY="1", COGWORKER_TIMEOUT_S="1", COGWORKER_GRACEFUL_STOP_TIMEOUT_S="1.5"
    )
    swarm.wait_ready()
    jids = {demo_jobs.sleepy.perform_async(tag, 30) for tag in ("s1", "s2")}
    wait_until(lambda: started(r, "s1") and started(r, "s2"), message="both jobs to start")
    for pid in swarm.current_children().values():
        os.kill(pid, signal.SIGSTOP)

    stop_at = time.monotonic()
    swarm.signal(signal.SIGTERM)
    assert swarm.wait() == exitcodes.FAILURE
    assert 1.4 < time.monotonic() - stop_at < 5
    killed = swarm.supervisor_events("straggler_killed")
    assert len(killed) == 2
    exits = swarm.supervisor_events("child_exited")
    assert {e["reason"] for e in exits} == {"straggler"} and all(e["requeue"] for e in exits)
    assert set(jids_on_queue(r)) == jids  # back on their queue, to run again
    assert r.keys("cogworker:inprogress:*") == []
    assert all(r.get(f"cogworker:orphanings:{jid}") == "1" for jid in jids)
    assert ran(r, "s1") == ran(r, "s2") == []


def test_a_child_that_drains_past_its_own_timeout_requeues_and_stops_cleanly(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_CONCURRENCY="1", COGWORKER_COUNT="1", COGWORKER_TIMEOUT_S="0.5")
    swarm.wait_ready()
    jid = demo_jobs.sleepy.perform_async("d", 30)
    wait_until(lambda: started(r, "d"), message="the job to start")
    assert swarm.stop() == exitcodes.OK
    assert jids_on_queue(r) == [jid]
    assert r.get(f"cogworker:orphanings:{jid}") is None  # a drain, not a death
    assert swarm.supervisor_events("child_exited")[0]["reason"] == "stop"


def test_requeue_waits_for_redis_when_a_child_dies_during_an_outage(
    swarms: SwarmRunner, tmp_path: Path
) -> None:
    from cogworker import codec
    from cogworker.api import payload

    server = RedisServer(persistent=True)  # survives its own restart with every job
    client = server.client()
    try:
        swarm = swarms.start(redis_url=server.url, COGWORKER_CONCURRENCY="1")
        swarm.wait_ready()
        client.lpush(
            "cogworker:queue:default",
            codec.dumps(payload.build("demo_jobs.sleepy", ("o", 2), {}, queue="default", retry=True)),
        )
        victim = wait_until(lambda: started(client, "o"), message="the job to start")[0]

        server.stop()
        os.kill(victim, signal.SIGKILL)
        deferred = swarm.wait_event("child_jobs_requeue_deferred")[0]
        assert deferred["pending"] == [swarm.identities()[victim]]
        swarm.wait_event("child_started", count=3)  # respawned anyway; the new child waits for Redis

        server.start()
        requeued = swarm.wait_event("child_jobs_requeued", timeout=20)[0]
        assert requeued["child_identity"] == swarm.identities()[victim] and requeued["moved"] == 1
        wait_until(lambda: ran(client, "o"), timeout=20, message="the job to run again once Redis is back")
        assert swarm.stop() == exitcodes.OK
    finally:
        client.close()
        server.close()


def test_a_dead_forkserver_is_replaced_and_children_go_on(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_CONCURRENCY="1", COGWORKER_COUNT="2")
    swarm.wait_ready()
    [first] = swarm.forkservers()
    children = {c.pid for c in swarm.children()}
    first.kill()
    died = swarm.wait_event("forkserver_exited")[0]
    assert died["forkserver_pid"] == first.pid and died["exit_code"] == -signal.SIGKILL
    # The running children never noticed.
    assert {c.pid for c in swarm.children()} == children
    wait_until(
        lambda: [p.pid for p in swarm.forkservers()] not in ([], [first.pid]), message="a new fork server"
    )
    swarm.wait_event("forkserver_ready", count=1)

    # A child killed mid-job now: requeued through the new fork server, and respawned from it.
    demo_jobs.sleepy.perform_async("after", 0.5)
    victim = wait_until(lambda: started(r, "after"), message="the job to start")[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: ran(r, "after"), message="the requeued job to complete")
    assert (
        swarm.supervisor_events("child_jobs_requeued", child_identity=swarm.identities()[victim])[0]["moved"]
        == 1
    )
    swarm.wait_ready()
    assert len(swarm.children()) == 2 and victim not in {c.pid for c in swarm.children()}
    assert swarm.stop() == exitcodes.OK


def test_a_briefly_stalled_forkserver_delays_a_respawn_but_loses_no_job(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_CONCURRENCY="1", COGWORKER_COUNT="1")
    swarm.wait_ready()
    # Long enough to be still running when its child is killed, however loaded the machine (at
    # 0.2 s it could end first, leaving nothing to requeue); it runs again in full once requeued.
    demo_jobs.sleepy.perform_async("stall", 2.0)
    victim = wait_until(lambda: started(r, "stall"), message="the job to start")[0]
    [server] = swarm.forkservers()
    os.kill(server.pid, signal.SIGSTOP)
    try:
        os.kill(victim, signal.SIGKILL)
        # The requeue and the respawn wait on the stopped fork server; the loop does not.
        swarm.wait_event("child_exited", child_pid=victim)
        stays(lambda: len(swarm.supervisor_events("child_started")) == 1, 1.0, "nothing forked meanwhile")
        assert not swarm.supervisor_events("child_jobs_requeued")
    finally:
        os.kill(server.pid, signal.SIGCONT)
    # Woken well within its deadline, it answers both, in order: the job is requeued, then the slot
    # is forked again from it. Nothing is given up on.
    requeued = swarm.wait_event("child_jobs_requeued")[0]
    respawned = swarm.wait_event("child_started", count=2)[1]
    assert at(requeued) <= at(respawned) and requeued["moved"] == 1
    wait_until(lambda: ran(r, "stall"), message="the requeued job to complete")
    swarm.wait_ready()
    assert [p.pid for p in swarm.forkservers()] == [server.pid]
    assert not swarm.supervisor_events("forkserver_hung") and not swarm.supervisor_events("fork_failed")
    assert [c.pid for c in swarm.children()] == list(swarm.current_children().values())
    assert swarm.stop() == exitcodes.OK


def test_an_app_slower_to_import_than_the_liveness_timeout_is_not_a_hang(swarms: SwarmRunner) -> None:
    # Without preload each child imports the app itself, saying nothing until it is done (3 s here,
    # three times the liveness timeout): the liveness clock starts with its first line.
    swarm = swarms.start(
        COGWORKER_COUNT="1",
        COGWORKER_PRELOAD="false",
        COGWORKER_REQUIRE="slow_import_app",
        SLOW_IMPORT_SECONDS="3",
        COGWORKER_LIVENESS_TIMEOUT_S="1",
    )
    swarm.wait_ready(timeout=30)
    [child] = swarm.supervisor_events("child_started")
    ready = swarm.supervisor_events("child_ready")[0]
    assert ready["child_pid"] == child["child_pid"] and at(ready) - at(child) >= 3
    assert not swarm.supervisor_events("child_hung") and not swarm.supervisor_events("child_exited")
    assert swarm.stop() == exitcodes.OK


def test_a_child_that_never_finishes_importing_is_killed_at_the_boot_deadline(swarms: SwarmRunner) -> None:
    swarm = swarms.start(
        COGWORKER_COUNT="1",
        COGWORKER_PRELOAD="false",
        COGWORKER_REQUIRE="slow_import_app",
        SLOW_IMPORT_SECONDS="60",
        COGWORKER_LIVENESS_TIMEOUT_S="0.5",
        COGWORKER_BOOT_TIMEOUT_S="2",
    )
    first = swarm.wait_event("child_started")[0]
    timed_out = swarm.wait_event("child_boot_timeout", timeout=20)[0]
    assert timed_out["child_pid"] == first["child_pid"] and timed_out["after_s"] >= 2
    assert not swarm.supervisor_events("child_hung")  # silent far past liveness, but only booting
    exited = swarm.wait_event("child_exited", child_pid=first["child_pid"])[0]
    assert exited["reason"] == "boot_timeout" and exited["signal"] == "SIGKILL"
    swarm.wait_event("child_started", count=2)  # its slot is forked again (with crash backoff)
    # (No stop here: a child stops once its import is done, 60 s from now; teardown kills the session.)


def pipes_of(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("pipe:"):
                found.add(target)
    return found


def test_a_program_a_job_runs_is_not_handed_the_childs_state_pipe(
    swarms: SwarmRunner, r: redis.Redis
) -> None:
    # What a job execs must not be able to write to the supervisor as if it were the child (nor keep
    # the pipe open after the child is gone).
    swarm = swarms.start(COGWORKER_COUNT="1", COGWORKER_REQUIRE="swarm_exec")
    swarm.wait_ready()
    [child] = swarm.children()
    state_pipe = pipes_of(child.pid) & pipes_of(swarm.pid)  # the one pipe they share
    assert len(state_pipe) == 1
    r.lpush(
        "cogworker:queue:default",
        codec.dumps(payload.build("swarm_exec.inherited_fds", ("x",), {}, queue="default", retry=False)),
    )
    line = wait_until(lambda: r.lrange("test:exec_fds", 0, -1), message="the job's report")[0]
    _tag, pid, *handed = line.split()
    assert int(pid) == child.pid and "pipe:" in " ".join(handed)  # (it lists its own stdout pipe)
    assert not state_pipe & set(handed)
    assert swarm.stop() == exitcodes.OK
