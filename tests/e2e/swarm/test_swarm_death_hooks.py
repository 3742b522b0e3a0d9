"""on_death hooks in a real swarm: a poison pill the fork server buries (a process that runs no
jobs) and a job that fails for good are each handled once, by a child, with hooks registered in the
child or inherited from a preloading fork server."""

from __future__ import annotations

import json

import death_jobs
import pytest
import redis

from cogworker.store import keys
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preload", ["false", "true"])
def test_deaths_in_a_swarm_call_a_childs_hooks_once(
    swarms: SwarmRunner, r: redis.Redis, configured: object, preload: str
) -> None:
    pill = death_jobs.pill.perform_async("pill")
    swarm = swarms.start(
        COGWORKER_REQUIRE="death_jobs", COGWORKER_MAX_ORPHANINGS="1", COGWORKER_PRELOAD=preload
    )
    swarm.wait_ready()

    def calls() -> list[dict[str, object]]:
        return [json.loads(raw) for raw in r.lrange("test:deaths", 0, -1)]

    wait_until(lambda: calls(), timeout=30, message="the pill's death handled")
    # Pushed only now: fetched beside the pill, it would die with it (orphaned twice, buried too).
    failed = death_jobs.fails_at_once.perform_async("for-good")
    wait_until(lambda: len(calls()) >= 2, timeout=15, message="the second death handled")
    wait_until(lambda: r.llen(keys.DEATHS) == 0, timeout=5, message="every notice popped")
    # The fork server completed the pill's burial (the swarm requeues a reaped child's jobs there).
    [buried] = swarm.events("poison_pill_to_dead")
    assert buried["role"] == "forkserver" and buried["jid"] == pill
    assert swarm.stop() == 0
    got = sorted((str(c["jid"]), str(c["cause"])) for c in calls())
    assert got == sorted([(str(pill), "poison_pill"), (str(failed), "failed")])
    # Hooks run in children only: neither the supervisor nor the fork server runs them.
    assert not {swarm.pid, buried["pid"]} & {c["pid"] for c in calls()}
