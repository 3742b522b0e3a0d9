"""A mixed fleet on one Redis in the Sidekiq mode, with bare keys and then under a redis-namespace: real
Sidekiq 6 runs the jobs Python pushes, a cogworker swarm runs the jobs Ruby pushes, 1,000 each way. A
tenth of each side's jobs fail their first attempt; both sides' pollers read the one retry set and
move each entry back to its own queue, whichever looks first. Nothing is lost: every jid succeeds
exactly once, after exactly the attempts it should take, nothing is left anywhere, and the shared
counters hold both sides' counts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sidekiq_fleet_jobs as jobs

from tests.support.redis_server import RedisServer
from tests.support.sidekiq_fleet import Fleet, fails_first
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

JOBS = 1_000
FAIL_EVERY = 10


# Sidekiq 6's two layouts: bare keys, and its redis-namespace (COGWORKER_SIDEKIQ_NAMESPACE).
@pytest.fixture(params=["", "myapp"], ids=["bare", "namespace"])
def fleet(
    private_redis: RedisServer, swarms: SwarmRunner, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Fleet]:
    built = Fleet(private_redis, swarms, tmp_path, namespace=request.param)
    try:
        yield built
    finally:
        built.close()


def test_a_thousand_jobs_each_way_with_crossed_retries_none_lost(fleet: Fleet) -> None:
    started = time.monotonic()
    py_jids = fleet.push_from_ruby(JOBS, FAIL_EVERY)
    rb_jids = fleet.push_from_python(JOBS, FAIL_EVERY)
    fleet.wait_all_done(py_jids, rb_jids)
    elapsed = time.monotonic() - started
    assert fleet.sidekiq.stop() == 0  # it writes its last counts to the shared counters as it stops
    assert fleet.swarm.stop() == 0

    failing = sum(fails_first(n, FAIL_EVERY) for n in range(JOBS))
    for side, jids, attempts_key, done_key in (
        ("python", py_jids, jobs.PY_ATTEMPTS, jobs.PY_DONE),
        ("ruby", rb_jids, jobs.RB_ATTEMPTS, jobs.RB_DONE),
    ):
        assert fleet.done(done_key) == dict.fromkeys(jids, 1), f"{side}: a jid ran to success not once"
        expected = {jid: 2 if fails_first(n, FAIL_EVERY) else 1 for n, jid in enumerate(jids)}
        assert fleet.done(attempts_key) == expected, f"{side}: a jid ran more or fewer times than it should"
    assert fleet.leftovers() == {}

    # Sidekiq counts every run as processed, its failures too; cogworker counts its successes.
    ruby_runs, python_successes = JOBS + failing, JOBS
    assert fleet.stats() == (ruby_runs + python_successes, 2 * failing)
    assert "Internal exception" not in fleet.sidekiq.log_text()
    print(f"FIGURE mixed fleet: 2 x {JOBS} jobs, {2 * failing} retried across, {elapsed:.1f} s")
