"""The collector during start-up (issue 18): off while the fork server and a worker import the code
and the app (supervisor/forkserver/main.py, cogworker/worker/main.py import_app), and on again, with
what was loaded frozen, in every worker by the time it runs a job."""

from __future__ import annotations

import json

import pytest
import redis

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preload", ["true", "false"])
def test_the_app_imports_without_collections_and_jobs_run_with_the_collector_on(
    swarms: SwarmRunner, r: redis.Redis, preload: str
) -> None:
    from cogworker import codec
    from cogworker.api import payload

    swarm = swarms.start(COGWORKER_REQUIRE="gc_probe", COGWORKER_PRELOAD=preload, COGWORKER_CONCURRENCY="1")
    swarm.wait_ready()
    # One job per thread of the two workers: each blocks no one, so both processes take one.
    for index in range(4):
        job = payload.build("gc_probe.collector_state", (f"j{index}",), {}, queue="default", retry=False)
        r.lpush("cogworker:queue:default", codec.dumps(job))
    seen = wait_until(lambda: r.llen("test:gc") == 4 and r.lrange("test:gc", 0, -1), message="four jobs")
    states = [json.loads(line) for line in seen]
    assert {s["pid"] for s in states} <= set(swarm.current_children().values())
    for state in states:
        # Imported in the fork server (preload) or in the worker: either way with the collector off.
        assert state["imported_with_collector"] is False, state
        # ... and on again before the job, with everything loaded by then frozen out of its reach.
        assert state["collector_on"] is True, state
        assert state["frozen"] > 10_000, state
    assert swarm.stop() == exitcodes.OK
