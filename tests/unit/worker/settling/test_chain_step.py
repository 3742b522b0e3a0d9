"""A chain step settled by the real processor and settler in this process (tests/support/inproc.py):
results passed on, the successor pushed exactly once however many runs of a step try to acknowledge
it, a dead step stopping the chain, and an ack stopped by a key of the wrong type leaving the step in
progress."""

from __future__ import annotations

import json
import threading

import chain_jobs
import pytest
import redis

import cogworker
from cogworker.api import client
from cogworker.settings import Settings, load_settings
from cogworker.store import keys, scripts
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.settling import chain_step
from cogworker.worker.settling.settle import Settler
from tests.support.inproc import IN_PROGRESS, Runner
from tests.support.redis_server import RedisServer, wait_until


@pytest.fixture
def runner(redis_server: RedisServer, r: redis.Redis, configured: Settings) -> Runner:
    return Runner(load_settings(redis_url=redis_server.url, require="chain_jobs"))


def runs(r: redis.Redis) -> list[str]:
    return list(r.lrange("test:chain:runs", 0, -1))


def test_three_steps_run_in_order_each_given_the_previous_result(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(
        chain_jobs.first.s(1), chain_jobs.second.s(2), chain_jobs.third.s(), pass_results=True
    )
    assert pushed is not None
    while runner.run_next():
        pass
    assert runs(r) == ["first 1", "second 10 2", "third 12"]
    assert cogworker.result(pushed.jids[2], timeout=0) == {"total": 24}
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert (status["state"], status["done"]) == ("complete", 3)
    assert all(s["state"] == "done" and s["done_at"] for s in status["steps"])
    assert status["completed_at"] >= status["created_at"]
    assert r.get(keys.STAT_PROCESSED) == "3"
    assert r.llen(IN_PROGRESS) == 0


def test_a_step_acknowledged_by_several_runs_pushes_its_successor_once(
    r: redis.Redis, runner: Runner
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    raw = r.lmove(keys.queue("default"), IN_PROGRESS, "RIGHT", "LEFT")
    job = json.loads(raw)
    # A run on a process whose list no longer holds the job (recovered from it) writes nothing.
    elsewhere = Settler(runner.parts.ctx, keys.in_progress("gone:1:x"))
    assert chain_step.succeeded(elsewhere, Work("default", raw), job, None, None) is False
    assert r.llen(keys.queue("default")) == 0
    assert chain_step.succeeded(runner.settler, Work("default", raw), job, None, None) is True
    # The same run's ack again (a reply lost, tried again): the job is gone, nothing more is pushed.
    assert chain_step.succeeded(runner.settler, Work("default", raw), job, None, None) is False
    [successor] = r.lrange(keys.queue("default"), 0, -1)
    assert json.loads(successor)["jid"] == pushed.jids[1]
    assert r.get(keys.STAT_PROCESSED) == "1"


def test_a_dead_step_stops_the_chain_and_its_status_says_so(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.doomed.s("b"), chain_jobs.step.s("c"))
    assert pushed is not None
    while runner.run_next():
        pass
    assert runs(r) == ["step a", "doomed b"]
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert status["state"] == "dead"
    assert [s["state"] for s in status["steps"]] == ["done", "dead", "pending"]
    assert status["error"] == {"error_class": "ValueError", "error_message": "b is doomed"}
    assert r.zcard(keys.DEAD) == 1


def test_a_dead_step_retried_from_dead_carries_the_chain_on(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(chain_jobs.doomed.s("x"), chain_jobs.step.s("after"))
    assert pushed is not None
    assert runner.run_next()
    assert cogworker.chain_status(pushed.id)["state"] == "dead"  # type: ignore[index]
    [entry] = r.zrange(keys.DEAD, 0, -1)
    r.zrem(keys.DEAD, entry)
    r.lpush(keys.queue("default"), entry)  # what `cogworker dead retry` does (graduate.lua)
    # Its second run fails too (it always does); make the retried run succeed instead.
    job = json.loads(entry)
    job["class"] = "chain_jobs.step"
    r.lset(keys.queue("default"), 0, json.dumps(job))
    while runner.run_next():
        pass
    assert runs(r) == ["doomed x", "step x", "step after"]
    status = cogworker.chain_status(pushed.id)
    assert status is not None and status["state"] == "complete"


def test_a_step_dead_without_a_worker_saying_so_is_read_from_its_status(
    r: redis.Redis, runner: Runner
) -> None:
    """A poison pill buried by recovery: only its status ("failed", tracked) tells the chain."""
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    r.hset(
        keys.status(pushed.first_jid), mapping={"status": "failed", "error_class": "cogworker.ProcessDied"}
    )
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert (status["state"], status["steps"][0]["state"]) == ("dead", "dead")
    assert status["error"]["error_class"] == "cogworker.ProcessDied"
    r.hset(keys.status(pushed.first_jid), "status", "cancelled")
    assert cogworker.chain_status(pushed.id)["state"] == "stopped"  # type: ignore[index]


def test_an_ack_stopped_by_a_wrong_type_key_leaves_the_step_in_progress(
    r: redis.Redis, runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chain_step, "ACK_RETRY_S", 0.3)
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    r.delete(keys.chain(pushed.id))
    r.set(keys.chain(pushed.id), "not a hash")
    assert runner.run_next()
    assert r.llen(IN_PROGRESS) == 1  # still ours: it runs again once the key is moved aside
    assert r.llen(keys.queue("default")) == 0
    assert keys.chain(pushed.id) in r.smembers(keys.GUARD_REQUESTS)


def test_without_an_in_progress_list_the_ack_pushes_unchecked(r: redis.Redis, runner: Runner) -> None:
    """Basic fetch (BRPOP) keeps no in-progress list (its settler's key is ""): the job was only in
    the worker's memory, so there is nothing to take off, and the next step is pushed."""
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    raw = r.rpop(keys.queue("default"))
    basic = Settler(runner.parts.ctx, "")
    assert chain_step.succeeded(basic, Work("default", raw), json.loads(raw), None, None) is True
    [successor] = r.lrange(keys.queue("default"), 0, -1)
    assert json.loads(successor)["jid"] == pushed.jids[1]
    assert cogworker.chain_status(pushed.id)["done"] == 1  # type: ignore[index]


def test_a_step_whose_chain_field_is_unusable_is_acknowledged_as_a_plain_job(
    r: redis.Redis, runner: Runner
) -> None:
    for n, field in enumerate(["nonsense", {"id": 7}, {"id": "c", "next": [{"class": "x"}]}]):
        raw = json.dumps({"class": "chain_jobs.step", "args": [f"odd{n}"], "jid": f"odd{n}", "chain": field})
        r.lpush(keys.queue("default"), raw)
        assert runner.run_next()
    assert runs(r) == ["step odd0", "step odd1", "step odd2"]
    assert r.llen(IN_PROGRESS) == 0 and r.llen(keys.queue("default")) == 0
    assert r.zcard(keys.DEAD) == 0 and r.zcard(keys.RETRY) == 0


def test_an_ack_whose_reply_is_lost_is_tried_again_and_pushes_the_next_step_once(
    private_redis: RedisServer,
) -> None:
    """Redis stops (SIGSTOP) with the ack sent on an open connection: the client times out and tries
    again until Redis is back. Continued, Redis runs the first ack (its reply goes nowhere), which
    pushes the next step; the try after it finds the step gone and writes nothing."""
    settings = load_settings(redis_url=private_redis.url, require="chain_jobs", redis_timeout_s=0.3)
    client.configure(settings)
    r = private_redis.client()
    runner = Runner(settings)
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    raw = r.lmove(keys.queue("default"), IN_PROGRESS, "RIGHT", "LEFT")
    # The script cached in Redis (a NOSCRIPT reply would make the first try a no-op), and one open
    # connection in the pool: the ack goes out on it, and is read by Redis once it is continued.
    runner.client.script_load(scripts.source("chain_ack"))
    done: list[bool] = []
    chain_step.outages.reset()
    private_redis.pause()
    try:
        acker = threading.Thread(
            target=lambda: done.append(
                chain_step.succeeded(runner.settler, Work("default", raw), json.loads(raw), None, None)
            )
        )
        acker.start()
        wait_until(lambda: chain_step.outages.down, timeout=10, message="the first try to time out")
    finally:
        private_redis.resume()
    acker.join(timeout=20)
    assert done == [False]  # the try that got an answer found the step gone
    [successor] = r.lrange(keys.queue("default"), 0, -1)
    assert json.loads(successor)["jid"] == pushed.jids[1]
    assert r.llen(IN_PROGRESS) == 0 and r.get(keys.STAT_PROCESSED) == "1"
