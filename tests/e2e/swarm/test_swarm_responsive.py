"""The supervisor's loop never waits on another process (issue 13 F; "The supervisor loop never waits
on another process" in docs/architecture.md).

A fork server that stops answering (here: SIGSTOPped) must not hold up the loop: deaths are still
noticed at once, signals are still acted on, the systemd watchdog is still fed, and once the fork
server has owed an answer for COGWORKER_LIVENESS_TIMEOUT_S it is replaced, after which every slot is
refilled and the killed children's jobs are requeued through the new one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from cogworker import exitcodes
from tests.support.notify_listener import NotifyListener
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner, stays

pytestmark = pytest.mark.slow

NOTICED_WITHIN_S = 1.0  # a death or a signal must be acted on this soon, whatever the fork server does


@pytest.fixture
def listener(short_dir: Path) -> Iterator[NotifyListener]:
    made = NotifyListener("abstract", short_dir)
    try:
        yield made
    finally:
        made.close()


def at(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(event["timestamp"]).timestamp()


def started(r: redis.Redis) -> dict[str, int]:
    """tag -> pid of the child that started the job tagged `tag` (demo_jobs.sleepy records them)."""
    return {line.split()[0]: int(line.split()[1]) for line in r.lrange("test:started", 0, -1)}


def queued_jids(r: redis.Redis) -> list[str]:
    return [json.loads(raw)["jid"] for raw in r.lrange("cogworker:queue:default", 0, -1)]


def is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_and_time_notice(swarm: Swarm, pid: int) -> float:
    """SIGKILL a child; seconds until the supervisor logged its exit."""
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    exited = swarm.wait_event("child_exited", child_pid=pid, timeout=30)[0]
    assert exited["reason"] == "signal" and exited["requeue"]
    return at(exited) - killed_at


def watchdog_gaps(listener: NotifyListener, start: float, end: float) -> list[float]:
    pings = [m.at for m in listener.messages if m.has("WATCHDOG") and start <= m.at <= end]
    return [b - a for a, b in itertools.pairwise([start, *pings, end])]


def test_a_stopped_forkserver_never_blocks_the_loop_and_is_replaced(
    swarms: SwarmRunner, r: redis.Redis, configured: object, listener: NotifyListener
) -> None:
    import demo_jobs

    swarm = swarms.start(
        COGWORKER_COUNT="4",
        COGWORKER_CONCURRENCY="1",
        COGWORKER_LIVENESS_TIMEOUT_S="3",
        COGWORKER_REDIS_TIMEOUT_S="1",  # a fork server owing an answer is hung after 3 + 1 s
        NOTIFY_SOCKET=listener.notify_socket,
        WATCHDOG_USEC="1000000",  # a ping every 0.5 s; systemd would abort after 1 s without one
    )
    swarm.wait_ready()
    jids = {tag: demo_jobs.sleepy.perform_async(tag, 60) for tag in ("v1", "v2", "v3")}
    victims = wait_until(
        lambda: (found := started(r)).keys() >= jids.keys() and found, message="three jobs to start"
    )
    survivors = set(swarm.current_children().values()) - set(victims.values())
    [server] = swarm.forkservers()

    os.kill(server.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        # Each death asks the stopped fork server for a requeue and a respawn; none may hold the loop.
        assert kill_and_time_notice(swarm, victims["v1"]) < NOTICED_WITHIN_S
        assert kill_and_time_notice(swarm, victims["v2"]) < NOTICED_WITHIN_S
        sent = time.time()
        swarm.signal(signal.SIGUSR1)
        quiet = swarm.wait_event("swarm_quiet", timeout=30)[0]
        assert at(quiet) - sent < NOTICED_WITHIN_S
        assert kill_and_time_notice(swarm, victims["v3"]) < NOTICED_WITHIN_S
        assert not swarm.supervisor_events("child_started", purpose="respawn")  # nothing forked yet

        # Past its deadline the fork server is declared hung, killed and replaced.
        hung = swarm.wait_event("forkserver_hung", timeout=20)[0]
        hung_seen = time.monotonic()
        assert hung["forkserver_pid"] == server.pid
        assert hung_seen - stopped_at >= 4 - 0.1
        wait_until(lambda: is_gone(server.pid), message="the hung fork server to be killed")
    finally:
        with contextlib.suppress(ProcessLookupError):  # (dead by now, unless the test failed)
            os.kill(server.pid, signal.SIGCONT)

    # The watchdog was fed all along.
    gaps = watchdog_gaps(listener, stopped_at, hung_seen)
    assert max(gaps) < 0.9, gaps

    # Every slot refilled from the new fork server, quiet (USR1 holds for children forked later).
    swarm.wait_ready(timeout=20)
    [new_server] = wait_until(lambda: swarm.forkservers(), message="a new fork server")
    assert new_server.pid != server.pid
    assert len(swarm.children()) == 4
    assert survivors <= set(swarm.current_children().values())

    # Nothing lost: the killed children's jobs were requeued (the quiet swarm leaves them queued).
    identities = swarm.identities()
    requeued_at = []
    for pid in victims.values():
        done = swarm.wait_event("child_jobs_requeued", child_identity=identities[pid])
        assert done[0]["moved"] == 1
        assert r.llen(f"cogworker:inprogress:{identities[pid]}") == 0
        requeued_at.append(at(done[0]))
    # Requeue before respawn: the new fork server got the requeues first, and answers in order.
    respawned_at = [at(e) for e in swarm.supervisor_events("child_started", purpose="respawn")]
    assert len(respawned_at) == 3 and max(requeued_at) <= min(respawned_at)
    wait_until(lambda: sorted(queued_jids(r)) == sorted(jids.values()), message="the three jobs queued")
    stays(lambda: sorted(queued_jids(r)) == sorted(jids.values()), 0.5, "the jobs stay queued (quiet)")
    assert all(r.get(f"cogworker:orphanings:{jid}") == "1" for jid in jids.values())
    assert swarm.stop() == exitcodes.OK


def test_a_stop_with_a_stopped_forkserver_still_requeues_the_dead_childs_jobs(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    swarm = swarms.start(
        COGWORKER_COUNT="2",
        COGWORKER_CONCURRENCY="1",
        COGWORKER_LIVENESS_TIMEOUT_S="2",
        COGWORKER_REDIS_TIMEOUT_S="1",
    )
    swarm.wait_ready()
    jid = demo_jobs.sleepy.perform_async("lost", 60)
    victim = wait_until(lambda: started(r).get("lost"), message="the job to start")
    [server] = swarm.forkservers()
    os.kill(server.pid, signal.SIGSTOP)
    try:
        os.kill(victim, signal.SIGKILL)
        swarm.wait_event("child_exited", child_pid=victim)
        swarm.signal(signal.SIGTERM)  # the requeue is owed by a fork server that will never answer
        # It is replaced even though the swarm is stopping, so the dead child's job goes back now
        # rather than after the orphan threshold (5 min), and the stop is a clean one.
        assert swarm.wait(timeout=30) == exitcodes.OK
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server.pid, signal.SIGCONT)
    identity = swarm.identities()[victim]
    assert swarm.supervisor_events("forkserver_hung")[0]["forkserver_pid"] == server.pid
    assert swarm.supervisor_events("child_jobs_requeued", child_identity=identity)[0]["moved"] == 1
    assert queued_jids(r) == [jid] and r.keys("cogworker:inprogress:*") == []
    assert not swarm.supervisor_events("requeue_pending_at_exit")
