"""Chains run by real `cogworker run` workers: three steps in order with results passed on, a step
retried then succeeding, a step whose process is SIGKILLed mid-run and recovered, and a dead step
stopping the chain. Every run of a step records itself in Redis from the job (tests/apps/chain_jobs.py),
so "the successor was pushed once" is read from what actually ran."""

from __future__ import annotations

import json
import random
import signal

import chain_jobs
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.chains import APP, finished, runs
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.monitor import Monitor
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


def test_three_steps_run_in_order_with_each_result_passed_on(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    pushed = cogworker.chain(
        chain_jobs.first.s(1), chain_jobs.second.s(2), chain_jobs.third.s(), pass_results=True
    )
    assert pushed is not None
    workers.start(**APP)
    workers.start(**APP)  # two processes: each step may land on either
    status = finished(pushed.id)
    assert status["state"] == "complete"
    assert runs(r) == ["first 1", "second 10 2", "third 12"]
    assert cogworker.result(pushed.jids[2], timeout=0) == {"total": 24}
    done_at = [s["done_at"] for s in status["steps"]]
    assert done_at == sorted(done_at)


def test_a_step_retried_then_succeeding_continues_the_chain_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.flaky.s("b"), chain_jobs.step.s("c"))
    assert pushed is not None
    workers.start(**APP)
    assert finished(pushed.id)["state"] == "complete"
    assert runs(r) == ["step a", "flaky b", "flaky b", "step c"]
    assert r.zcard(keys.RETRY) == 0 and r.llen(keys.queue("default")) == 0


def test_a_step_sigkilled_mid_run_and_recovered_continues_the_chain_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.stall_once.s("b"), chain_jobs.step.s("c"))
    assert pushed is not None
    victim = workers.start(**APP, **QUICK_RECOVERY)
    wait_until(lambda: "stall_once b" in runs(r), timeout=20, message="the stalling step's first run")
    status = cogworker.chain_status(pushed.id)
    assert status is not None and [s["state"] for s in status["steps"]] == ["done", "running", "pending"]
    victim.signal(signal.SIGKILL)
    assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    workers.start(**APP, **QUICK_RECOVERY)
    assert finished(pushed.id)["state"] == "complete"
    assert runs(r) == ["step a", "stall_once b", "stall_once b", "step c"]
    # Nothing left to run a step again: the successor was pushed by one ack only.
    assert r.llen(keys.queue("default")) == 0 and r.get(keys.STAT_PROCESSED) == "3"


def test_a_dead_step_stops_the_chain_and_chain_status_reports_it(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.doomed.s("b"), chain_jobs.step.s("c"))
    assert pushed is not None
    workers.start(**APP)
    status = finished(pushed.id)
    assert status["state"] == "dead"
    assert [s["state"] for s in status["steps"]] == ["done", "dead", "pending"]
    assert status["error"] == {"error_class": "ValueError", "error_message": "b is doomed"}
    assert runs(r) == ["step a", "doomed b"]
    # The step's status says "failed" as its failure is filed: the filing may follow a moment later.
    wait_until(lambda: r.zcard(keys.DEAD) == 1, timeout=10, message="the dead step's entry")
    assert r.llen(keys.queue("default")) == 0


def test_many_chains_over_three_processes_run_each_step_exactly_once(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    """No crash, so nothing may run twice: a successor pushed twice would show as a second run."""
    pushed = [
        cogworker.chain(*(chain_jobs.step.s(f"{n}.{i}") for i in range(4)), chain_jobs.first.s(n))
        for n in range(25)
    ]
    for _ in range(3):
        workers.start(**APP)
    for chain in pushed:
        assert chain is not None
        assert finished(chain.id)["state"] == "complete"
    wait_until(lambda: r.get(keys.STAT_PROCESSED) == str(25 * 5), timeout=10, message="every step counted")
    seen = runs(r)
    assert sorted(seen) == sorted(
        [f"step {n}.{i}" for n in range(25) for i in range(4)] + [f"first {n}" for n in range(25)]
    )
    for n in range(25):  # each chain's steps in order
        mine = [entry for entry in seen if entry.startswith(f"step {n}.") or entry == f"first {n}"]
        assert mine == [f"step {n}.{i}" for i in range(4)] + [f"first {n}"]


def test_workers_sigkilled_at_random_moments_push_each_successor_exactly_once(
    r: redis.Redis, redis_server: RedisServer, configured: Settings, workers: WorkerPool
) -> None:
    """Eight chains of four steps over two workers, one of them SIGKILLed (and replaced) six times.
    Each kill follows a step's start or end record, so some land mid-run and some between a body's
    end and its ack (those steps run to their end twice). Steps may run again (at least once), but
    MONITOR shows each step after the first pushed by exactly one script-run LPUSH: a killed run
    never acknowledges, the run after it does. (An ack that runs twice for one step -- a lost reply
    tried again, a process declared dead -- is tests/unit/worker/settling/test_chain_step.py's.)"""
    monitor = Monitor(redis_server.url)
    try:
        chains = [cogworker.chain(*(chain_jobs.nap.s(f"{n}.{i}", 0.15) for i in range(4))) for n in range(8)]
        env = {**APP, **QUICK_RECOVERY, "COGWORKER_CONCURRENCY": "2"}
        live = [workers.start(**env), workers.start(**env)]
        rng = random.Random(19)
        for kill in range(1, 7):
            wait_until(lambda k=kill: r.llen("test:chain:naps") >= 7 * k, timeout=60, message=f"kill {kill}")
            victim = live.pop(rng.randrange(len(live)))
            victim.signal(signal.SIGKILL)
            victim.proc.wait(timeout=5)
            live.append(workers.start(**env))
        for chain in chains:
            assert chain is not None
            assert finished(chain.id, timeout=90)["state"] == "complete"
    finally:
        commands = monitor.stop()
    pushes: dict[str, int] = {}
    for command in commands:
        if (
            command.source == "lua"
            and command.name == "LPUSH"
            and command.args[1].startswith(b"cogworker:queue:")
        ):
            for raw in command.args[2:]:
                jid = json.loads(raw)["jid"]
                pushes[jid] = pushes.get(jid, 0) + 1
    later_steps = [jid for chain in chains if chain is not None for jid in chain.jids[1:]]
    assert {jid: pushes.get(jid, 0) for jid in later_steps} == {jid: 1 for jid in later_steps}
    ended = runs(r)
    for n in range(8):  # every step ran to its end, in order within its chain
        mine = [e for e in ended if e.startswith(f"nap {n}.")]
        assert sorted(set(mine), key=mine.index) == [f"nap {n}.{i}" for i in range(4)]
    started = sum(1 for e in r.lrange("test:chain:naps", 0, -1) if e.startswith("start"))
    print(f"FIGURE chain kills: 6, step runs started {started}, ended {len(ended)}, steps 32")
