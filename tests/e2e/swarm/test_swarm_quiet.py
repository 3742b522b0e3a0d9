"""Quiet (USR1/TSTP) is relayed, remembered for children forked later, and undone by remote resume."""

from __future__ import annotations

import os
import signal

import pytest
import redis

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner, stays

pytestmark = pytest.mark.slow


def quiet_in_redis(r: redis.Redis, swarm: Swarm) -> dict[int, str | None]:
    """slot -> the `quiet` field of its current child's presence hash (written on every beat)."""
    ids = swarm.identities()
    return {
        slot: r.hget(f"cogworker:process:{ids[pid]}", "quiet")
        for slot, pid in swarm.current_children().items()
    }


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTSTP], ids=["USR1", "TSTP"])
def test_quiet_holds_for_respawned_children_until_remote_resume(
    swarms: SwarmRunner, r: redis.Redis, configured, signum: int
) -> None:
    import demo_jobs

    swarm = swarms.start()
    swarm.wait_ready()
    swarm.signal(signum)
    wait_until(lambda: set(quiet_in_redis(r, swarm).values()) == {"1"}, message="both children quiet")

    for i in range(3):
        demo_jobs.record.perform_async(f"q{i}")
    # (A fetcher blocked on the queue when quiet came may take a job and give it straight back.)
    stays(lambda: r.llen("test:ran") == 0, 1.0, "quiet children run nothing")
    wait_until(lambda: r.llen("cogworker:queue:default") == 3, message="every job still queued")

    # A child dying while the swarm is quiet is replaced by a quiet one: it fetches nothing, ever.
    victim = swarm.current_children()[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: swarm.current_children().get(0) not in (None, victim), message="slot 0 respawned")
    swarm.wait_ready()
    wait_until(lambda: set(quiet_in_redis(r, swarm).values()) == {"1"}, message="the new child quiet too")
    stays(lambda: r.llen("cogworker:queue:default") == 3, 0.5, "the respawned child fetches nothing")
    assert r.llen("test:ran") == 0

    # Undo is remote, per child, through Redis.
    ids = swarm.identities()
    for pid in swarm.current_children().values():
        r.lpush(f"cogworker:signals:{ids[pid]}", "resume")
    wait_until(lambda: r.llen("test:ran") == 3, message="the jobs to run after resume")
    wait_until(lambda: len(swarm.supervisor_events("child_resumed")) == 2, message="the swarm to see it")
    assert swarm.stop() == exitcodes.OK


def test_running_jobs_finish_after_quiet(swarms: SwarmRunner, r: redis.Redis, configured) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_COUNT="1")
    swarm.wait_ready()
    demo_jobs.sleepy.perform_async("long", 1.5)
    wait_until(lambda: r.llen("test:started") == 1)
    swarm.signal(signal.SIGUSR1)
    wait_until(lambda: set(quiet_in_redis(r, swarm).values()) == {"1"}, message="the child quiet")
    demo_jobs.record.perform_async("after")
    wait_until(lambda: r.llen("test:ran") == 1, message="the running job to finish")
    assert r.lindex("test:ran", 0).startswith("long")
    stays(lambda: r.llen("test:ran") == 1, 0.5, "nothing new runs")
    assert r.llen("cogworker:queue:default") == 1
    assert swarm.stop() == exitcodes.OK
