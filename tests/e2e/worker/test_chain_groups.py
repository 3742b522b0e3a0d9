"""Groups inside chains (`cogworker.group`, api/chain_group.py) run by real `cogworker run` workers:
a three-member group in the middle runs between its neighbours and the step after it runs once,
after every member (with results passed: their list, in order); a member retried then succeeding; a
member that goes to dead stopping the chain; a member whose worker is SIGKILLed mid-run and
recovered. Every run records itself in Redis from the job (tests/apps/chain_jobs.py)."""

from __future__ import annotations

import signal

import chain_jobs
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.chains import APP, finished, runs
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool


def naps(r: redis.Redis) -> list[str]:
    return list(r.lrange("test:chain:naps", 0, -1))


def test_a_group_in_the_middle_runs_between_its_neighbours_and_the_next_step_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    members = [chain_jobs.nap.s(f"m{i}", 0.3 * i) for i in (1, 2, 3)]
    plain = cogworker.chain(chain_jobs.step.s("a"), cogworker.group(*members), chain_jobs.step.s("c"))
    passing = cogworker.chain(
        chain_jobs.first.s(1),
        cogworker.group(chain_jobs.second.s(1), chain_jobs.second.s(2), chain_jobs.second.s(3)),
        chain_jobs.third.s(),
        pass_results=True,
    )
    assert plain is not None and passing is not None
    workers.start(**APP)
    workers.start(**APP)
    for pushed in (plain, passing):
        status = finished(pushed.id)
        assert status["state"] == "complete" and [s["state"] for s in status["steps"]] == ["done"] * 3
        assert status["steps"][1]["bid"] == pushed.jids[1]
    seen = runs(r)
    mine = [e for e in seen if e in ("step a", "step c") or e.startswith("nap ")]
    assert mine[0] == "step a" and sorted(mine[1:4]) == ["nap m1", "nap m2", "nap m3"]
    assert mine[4:] == ["step c"]
    # Each member ran once (a start and an end each), and recorded its run at its end: "step c" was
    # recorded after all three.
    assert sorted(e.split()[0] for e in naps(r)) == ["end"] * 3 + ["start"] * 3
    theirs = [e for e in seen if e.startswith(("first", "second", "third"))]
    assert theirs[0] == "first 1" and sorted(theirs[1:4]) == ["second 10 1", "second 10 2", "second 10 3"]
    assert theirs[4:] == ["third [11, 12, 13]"]
    assert cogworker.result(passing.jids[2], timeout=0) == {"total": [11, 12, 13, 11, 12, 13]}
    for pushed in (plain, passing):
        batch = cogworker.batch_status(pushed.jids[1])
        assert batch is not None and (batch.total, batch.done, batch.failed) == (3, 3, 0)
    assert r.llen(keys.queue("default")) == 0


def test_a_member_retried_then_succeeding_continues_the_chain_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    group = cogworker.group(chain_jobs.step.s("m1"), chain_jobs.flaky.s("m2"), chain_jobs.step.s("m3"))
    pushed = cogworker.chain(chain_jobs.step.s("a"), group, chain_jobs.step.s("after"))
    assert pushed is not None
    workers.start(**APP)
    assert finished(pushed.id)["state"] == "complete"
    seen = runs(r)
    assert seen[0] == "step a" and seen[-1] == "step after"
    assert sorted(seen[1:-1]) == ["flaky m2", "flaky m2", "step m1", "step m3"]
    batch = cogworker.batch_status(pushed.jids[1])
    assert batch is not None and (batch.done, batch.failed) == (3, 0)
    assert r.zcard(keys.RETRY) == 0 and r.llen(keys.queue("default")) == 0


def test_a_member_that_goes_to_dead_stops_the_chain(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    group = cogworker.group(chain_jobs.step.s("m1"), chain_jobs.doomed.s("m2"))
    pushed = cogworker.chain(chain_jobs.step.s("a"), group, chain_jobs.step.s("after"))
    assert pushed is not None
    workers.start(**APP)
    status = finished(pushed.id)
    assert status["state"] == "dead"
    assert [s["state"] for s in status["steps"]] == ["done", "dead", "pending"]
    assert status["error"] == {"error_class": "ValueError", "error_message": "m2 is doomed"}
    # The batch's on_death records the member on the chain; its on_success never runs.
    doomed = status["steps"][1]["members"][1]
    wait_until(lambda: r.hget(keys.chain(pushed.id), "dead_jid") == doomed, timeout=30, message="on_death")

    def callbacks() -> dict[str, str] | None:
        batch = cogworker.batch_status(pushed.jids[1])
        return {c.kind: c.state for c in batch.callbacks} if batch is not None and batch.complete else None

    wanted = {"success": "waiting", "death": "done"}
    wait_until(lambda: callbacks() == wanted, timeout=30, message="the batch's end and its on_death's")
    batch = cogworker.batch_status(pushed.jids[1])
    assert batch is not None and (batch.dead, batch.failed, batch.done) == (1, 1, 2)
    assert sorted(runs(r)) == ["doomed m2", "step a", "step m1"]
    assert r.zcard(keys.DEAD) == 1 and r.llen(keys.queue("default")) == 0


def test_a_member_sigkilled_mid_run_and_recovered_continues_the_chain_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    group = cogworker.group(chain_jobs.step.s("m1"), chain_jobs.stall_once.s("m2"))
    pushed = cogworker.chain(chain_jobs.step.s("a"), group, chain_jobs.step.s("c"))
    assert pushed is not None
    victim = workers.start(**APP, **QUICK_RECOVERY)
    wait_until(lambda: "stall_once m2" in runs(r), timeout=30, message="the stalling member's first run")

    def pending() -> int | None:
        batch = cogworker.batch_status(pushed.jids[1])
        return batch.pending if batch is not None else None

    # The other member ended and was counted (its run is recorded in its body, counted at its ack).
    wait_until(lambda: pending() == 1, timeout=30, message="the other member counted")
    status = cogworker.chain_status(pushed.id)
    assert status is not None and [s["state"] for s in status["steps"]] == ["done", "running", "pending"]
    victim.signal(signal.SIGKILL)
    assert victim.proc.wait(timeout=10) == -signal.SIGKILL
    # Killed mid-run: still pending (not failed), and the chain waits for it.
    batch = cogworker.batch_status(pushed.jids[1])
    assert batch is not None and (batch.pending, batch.failed, batch.complete) == (1, 0, False)
    workers.start(**APP, **QUICK_RECOVERY)
    assert finished(pushed.id, timeout=90)["state"] == "complete"
    seen = runs(r)
    assert sorted(seen) == ["stall_once m2", "stall_once m2", "step a", "step c", "step m1"]
    assert seen[-1] == "step c"
    assert r.llen(keys.queue("default")) == 0
