"""A group inside a chain (api/chain_group.py) run by the real processor and settler in this process
(tests/support/inproc.py): its members as one batch, the step after it given their results in order,
the group pushed once however many runs of the step before it try to acknowledge it, a dead member
stopping the chain, a group as the first step, bad groups refused, and `cogworker.group` as the first
call of a fresh interpreter."""

from __future__ import annotations

import json

import chain_jobs
import pytest
import redis

import cogworker
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.settling import chain_step
from cogworker.worker.settling.settle import Settler
from tests.support.first_call import first_call
from tests.support.inproc import IN_PROGRESS, Runner
from tests.support.redis_server import RedisServer


@pytest.fixture
def runner(redis_server: RedisServer, r: redis.Redis, configured: Settings) -> Runner:
    return Runner(load_settings(redis_url=redis_server.url, require="chain_jobs"))


def runs(r: redis.Redis) -> list[str]:
    return list(r.lrange("test:chain:runs", 0, -1))


def drain(runner: Runner) -> None:
    while runner.run_next():
        pass


def test_a_group_in_the_middle_passes_its_members_results_in_order(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(
        chain_jobs.first.s(1),
        cogworker.group(chain_jobs.second.s(1), chain_jobs.second.s(2), chain_jobs.second.s(3)),
        chain_jobs.third.s(),
        pass_results=True,
    )
    assert pushed is not None
    assert runner.run_next()  # first: its ack creates the batch and pushes the three members
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    group = status["steps"][1]
    assert (group["state"], group["bid"], group["class"]) == ("running", pushed.jids[1], "cogworker.group")
    assert group["batch"] == {"total": 3, "done": 0, "failed": 0, "dead": 0}
    assert r.scard(keys.batch_pending(pushed.jids[1])) == 3 and r.llen(keys.queue("default")) == 3
    drain(runner)
    assert runs(r)[:1] == ["first 1"] and sorted(runs(r)[1:4]) == [
        "second 10 1",
        "second 10 2",
        "second 10 3",
    ]
    assert runs(r)[4:] == ["third [11, 12, 13]"]
    assert cogworker.result(pushed.jids[2], timeout=0) == {"total": [11, 12, 13, 11, 12, 13]}
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert (status["state"], [s["state"] for s in status["steps"]]) == ("complete", ["done"] * 3)
    batch = cogworker.batch_status(pushed.jids[1])
    assert batch is not None and batch.complete and batch.failed == 0
    assert r.llen(IN_PROGRESS) == 0


def test_the_step_before_a_group_acked_by_several_runs_pushes_the_group_once(
    r: redis.Redis, runner: Runner
) -> None:
    pushed = cogworker.chain(
        chain_jobs.step.s("a"), cogworker.group(chain_jobs.step.s("m1"), chain_jobs.step.s("m2"))
    )
    assert pushed is not None
    raw = r.lmove(keys.queue("default"), IN_PROGRESS, "RIGHT", "LEFT")
    job = json.loads(raw)
    elsewhere = Settler(runner.parts.ctx, keys.in_progress("gone:1:x"))
    assert chain_step.succeeded(elsewhere, Work("default", raw), job, None, None) is False
    assert r.llen(keys.queue("default")) == 0 and not r.exists(keys.batch(pushed.jids[1]))
    assert chain_step.succeeded(runner.settler, Work("default", raw), job, None, None) is True
    assert chain_step.succeeded(runner.settler, Work("default", raw), job, None, None) is False
    # The batch exists already: even an ungated ack (basic fetch) creates and pushes nothing more.
    basic = Settler(runner.parts.ctx, "")
    assert chain_step.succeeded(basic, Work("default", raw), job, None, None) is True
    assert sorted(json.loads(m)["jid"] for m in r.lrange(keys.queue("default"), 0, -1)) == sorted(
        json.loads(r.hget(keys.chain(pushed.id), "steps"))[1]["members"][i]["jid"] for i in range(2)
    )
    drain(runner)
    status = cogworker.chain_status(pushed.id)
    assert status is not None and status["state"] == "complete"
    assert sorted(runs(r)) == ["step m1", "step m2"]


def test_a_dead_member_stops_the_chain(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(
        cogworker.group(chain_jobs.step.s("m1"), chain_jobs.doomed.s("m2")), chain_jobs.step.s("after")
    )
    assert pushed is not None  # a group first: pushed by chain() itself
    assert r.llen(keys.queue("default")) == 2
    drain(runner)
    assert sorted(runs(r)) == ["doomed m2", "step m1"]
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert (status["state"], [s["state"] for s in status["steps"]]) == ("dead", ["dead", "pending"])
    assert status["error"] == {"error_class": "ValueError", "error_message": "m2 is doomed"}
    assert r.hget(keys.chain(pushed.id), "dead_jid") == status["steps"][0]["members"][1]
    batch = cogworker.batch_status(pushed.jids[0])
    assert batch is not None and batch.dead == 1
    assert {c.kind: c.state for c in batch.callbacks} == {"success": "waiting", "death": "done"}


def test_a_dead_member_is_reported_before_the_death_callback_ran(r: redis.Redis, runner: Runner) -> None:
    pushed = cogworker.chain(cogworker.group(chain_jobs.doomed.s("m")), chain_jobs.step.s("after"))
    assert pushed is not None
    assert runner.run_next()  # the member goes to dead; its batch's on_death is queued, not run
    status = cogworker.chain_status(pushed.id)
    assert status is not None and (status["state"], status["steps"][0]["state"]) == ("dead", "dead")
    assert status["error"] == {"error_class": "ValueError", "error_message": "m is doomed"}


def test_bad_groups_are_refused_before_anything_is_written(r: redis.Redis, configured: Settings) -> None:
    with pytest.raises(TypeError, match="at least one member"):
        cogworker.group()
    with pytest.raises(TypeError, match="must be a signature"):
        cogworker.group(chain_jobs.step)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="can't apply to a group's members"):
        cogworker.group(chain_jobs.step.set(unique="until_executed").s("a"))
    with pytest.raises(TypeError, match="must be a signature"):
        cogworker.group(cogworker.group(chain_jobs.step.s("a")))  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_group_and_chain_status_as_the_first_calls(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker, chain_jobs
        pushed = cogworker.chain(chain_jobs.step.s("a"), cogworker.group(chain_jobs.step.s("b")))
        status = cogworker.chain_status(pushed.id)
        print(pushed.jids[1], status["steps"][1]["bid"], ",".join(s["state"] for s in status["steps"]))
    """
    bid, shown, states = first_call(code, redis_server.url, COGWORKER_REQUIRE="chain_jobs").split(" ")
    assert (shown, states) == (bid, "queued,pending")
    assert not r.exists(keys.batch(bid))  # created by the ack of the step before it


def test_a_key_of_the_wrong_type_stops_a_group_before_anything_is_written(
    r: redis.Redis, configured: Settings
) -> None:
    r.set(keys.queue("elsewhere"), "not a list")
    member = chain_jobs.step.set(queue="elsewhere").s("m")
    with pytest.raises(cogworker.WrongTypeKey):
        cogworker.chain(cogworker.group(chain_jobs.step.s("ok"), member))
    assert r.keys(keys.chain("*")) == [] and r.keys(keys.batch("*")) == []
    assert r.llen(keys.queue("default")) == 0


def test_a_group_step_reads_as_stopped_or_queued_from_its_batch(r: redis.Redis, configured: Settings) -> None:
    pushed = cogworker.chain(cogworker.group(chain_jobs.step.s("m")), chain_jobs.step.s("after"))
    assert pushed is not None
    # A member that ended unrun (expired, cancelled): the batch completes with a failure, no death.
    r.hset(keys.batch(pushed.jids[0]), mapping={"failed": 1, "done": 1, "completed_at": 1})
    status = cogworker.chain_status(pushed.id)
    assert status is not None and (status["state"], status["steps"][0]["state"]) == ("stopped", "stopped")
    r.delete(keys.batch(pushed.jids[0]))  # its records expired
    status = cogworker.chain_status(pushed.id)
    assert status is not None and (status["state"], status["steps"][0]["state"]) == ("running", "queued")
