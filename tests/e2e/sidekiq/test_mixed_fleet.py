"""A mixed fleet on one Redis in the Sidekiq mode, with bare keys and then under a redis-namespace: real
Sidekiq 6 runs the jobs Python pushes, a cogworker swarm runs the jobs Ruby pushes, 1,000 each way. A
tenth of each side's jobs fail their first attempt; both sides' pollers read the one retry set and
move each entry back to its own queue, whichever looks first. Nothing is lost: every jid succeeds
exactly once, after exactly the attempts it should take, nothing is left anywhere, and the shared
counters hold both sides' counts. Sidekiq's poller, which cogworker's nearly always beats, is shown
moving Python retries back to the Python queue on its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sidekiq_fleet_jobs as jobs

from tests.support.redis_server import RedisServer, wait_until
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

    # Which poller moved each retry back: Sidekiq's notes its own; cogworker's did the rest.
    by_ruby = fleet.graduated_by_ruby()
    retried_py = {jid for n, jid in enumerate(py_jids) if fails_first(n, FAIL_EVERY)}
    retried_rb = {jid for n, jid in enumerate(rb_jids) if fails_first(n, FAIL_EVERY)}
    assert by_ruby <= retried_py | retried_rb
    crossed = len(retried_py & by_ruby) + len(retried_rb - by_ruby)
    assert crossed > 0, "every retry was moved back by its own side's poller: nothing crossed"

    # Sidekiq counts every run as processed, its failures too; cogworker counts its successes.
    ruby_runs, python_successes = JOBS + failing, JOBS
    assert fleet.stats() == (ruby_runs + python_successes, 2 * failing)
    assert "Internal exception" not in fleet.sidekiq.log_text()
    print(
        f"FIGURE mixed fleet: 2 x {JOBS} jobs, {2 * failing} retried; by the other side's poller: "
        f"{len(retried_py & by_ruby)} Python retries (Sidekiq's), {len(retried_rb - by_ruby)} Ruby "
        f"retries (cogworker's); {elapsed:.1f} s"
    )


def test_sidekiqs_poller_moves_python_retries_back_to_the_python_queue(
    private_redis: RedisServer, swarms: SwarmRunner, tmp_path: Path
) -> None:
    # cogworker's poller looks at the retry set at least once a second, so above it moves nearly every
    # due retry, Ruby's too. Here it can't: the swarm is stopped while the retries fall due, and only
    # Sidekiq's poller is left to move them, to the Python queue, where a new swarm runs them.
    fleet = Fleet(private_redis, swarms, tmp_path)
    try:
        jids = fleet.push_from_ruby(20, fail_every=1, name="FleetLateRetryJob")
        wait_until(
            lambda: fleet.client.zcard("retry") == 20,
            timeout=15,
            message=f"20 first attempts failed:\n{fleet.swarm.tail()}",
        )
        assert fleet.swarm.stop() == 0
        for raw in fleet.client.zrange("retry", 0, -1):
            fleet.client.zadd("retry", {raw: 0}, xx=True)
        wait_until(
            lambda: fleet.graduated_by_ruby() == set(jids),
            timeout=30,
            message=f"Sidekiq's poller to move the 20 retries:\n{fleet.sidekiq.log_text()[-3000:]}",
        )
        assert fleet.client.llen(f"queue:{jobs.PY_QUEUE}") == 20
        fleet.restart_swarm(swarms)
        wait_until(lambda: fleet.done(jobs.PY_DONE) == dict.fromkeys(jids, 1), timeout=30)
        assert fleet.sidekiq.stop() == 0
        assert fleet.swarm.stop() == 0
        assert fleet.done(jobs.PY_ATTEMPTS) == dict.fromkeys(jids, 2)
        assert fleet.leftovers() == {}
    finally:
        fleet.close()
