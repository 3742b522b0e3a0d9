"""`cogworker.chain` and `job.s(...)` on the job API's side: what a chain writes before any worker
runs it, bad input refused before anything is written, `chain_status` of a fresh and an unknown
chain, and both as the first call of a fresh interpreter configured only by environment variables."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import chain_jobs
import pytest
import redis
import typed_jobs

import cogworker
from cogworker import testing
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer


def test_a_chain_pushes_its_first_step_and_records_every_steps_jid(
    r: redis.Redis, configured: Settings
) -> None:
    pushed = cogworker.chain(chain_jobs.first.s(1), chain_jobs.second.s(2), chain_jobs.third.s())
    assert pushed is not None
    assert len(pushed.jids) == 3 and len(set(pushed.jids)) == 3
    [raw] = r.lrange(keys.queue("default"), 0, -1)
    job = json.loads(raw)
    assert (job["class"], job["args"], job["jid"]) == ("chain_jobs.first", [1], pushed.first_jid)
    assert job["chain"]["id"] == pushed.id and job["chain"]["step"] == 0
    assert [s["jid"] for s in job["chain"]["next"]] == list(pushed.jids[1:])
    assert job["status"] is True  # tracked, so chain_status can tell the step's state
    assert 0 < r.ttl(keys.chain(pushed.id)) <= 7 * 24 * 3600
    status = cogworker.chain_status(pushed.id)
    assert status is not None
    assert (status["state"], status["done"], status["total"]) == ("running", 0, 3)
    assert [s["state"] for s in status["steps"]] == ["queued", "pending", "pending"]
    assert [s["jid"] for s in status["steps"]] == list(pushed.jids)


def test_options_of_a_signature_ride_with_its_step(r: redis.Redis, configured: Settings) -> None:
    later = chain_jobs.step.set(queue="later", retry=3).s("b")
    assert later.set(timeout_s=5).options == {"queue": "later", "retry": 3, "timeout_s": 5}
    pushed = cogworker.chain(chain_jobs.step.s("a"), later.set(timeout_s=5), pass_results=True, ttl_s=60)
    assert pushed is not None
    job = json.loads(r.lrange(keys.queue("default"), 0, -1)[0])
    [spec] = job["chain"]["next"]
    assert spec["queue"] == "later"
    assert spec["options"] == {"retry": 3, "timeout_s": 5, "status": True, "result_ttl": 86400.0}
    assert job["result_ttl"] == 86400.0 and job["chain"]["pass"] is True
    assert 0 < r.ttl(keys.chain(pushed.id)) <= 60


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: cogworker.chain(), "at least one step"),
        (lambda: cogworker.chain(chain_jobs.step), "must be a signature"),
        (
            lambda: cogworker.chain(
                chain_jobs.step.s("a"), chain_jobs.step.set(unique="until_executed").s("b")
            ),
            "unique only apply to the first step",
        ),
        (lambda: cogworker.chain(chain_jobs.step.s("a"), ttl_s=0), "ttl_s must be seconds"),
        (lambda: cogworker.chain(chain_jobs.step.s("a"), result_ttl=True), "result_ttl must be seconds"),
        (
            lambda: cogworker.chain(chain_jobs.step.set(result_ttl=0).s("a"), pass_results=True),
            "pass_results=True needs",
        ),
        (lambda: chain_jobs.step.s(object()), r"args\[0\]: object is not JSON-native"),
        (lambda: chain_jobs.step.s("a").set(bogus=1), "unknown job option"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    r: redis.Redis, configured: Settings, make: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        make()  # type: ignore[operator]
    assert r.keys("*") == []


def test_a_chain_whose_first_push_is_stopped_leaves_nothing(r: redis.Redis, configured: Settings) -> None:
    def stop(job: dict[str, object], call_next: object) -> None:
        return None

    cogworker.client_chain.add(stop)
    try:
        assert cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b")) is None
    finally:
        cogworker.client_chain.remove(stop)
    assert r.keys(keys.chain("*")) == []
    assert r.llen(keys.queue("default")) == 0


def test_testing_modes_refuse_chains(r: redis.Redis, configured: Settings) -> None:
    with testing.fake(), pytest.raises(RuntimeError, match="chains need Redis"):
        cogworker.chain(chain_jobs.step.s("a"))


def test_an_unknown_chain_has_no_status(r: redis.Redis, configured: Settings) -> None:
    assert cogworker.chain_status("nope") is None


def test_chain_and_chain_status_as_the_first_calls(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker, chain_jobs
        pushed = cogworker.chain(chain_jobs.first.s(1), chain_jobs.second.s(2), pass_results=True)
        status = cogworker.chain_status(pushed.id)
        print(pushed.id, pushed.first_jid, status["state"], [s["state"] for s in status["steps"]])
    """
    out = first_call(code, redis_server.url, COGWORKER_REQUIRE="chain_jobs").split(" ", 3)
    cid, first_jid, state, steps = out
    assert (state, steps) == ("running", "['queued', 'pending']")
    assert json.loads(r.lindex(keys.queue("default"), 0))["jid"] == first_jid
    assert r.hget(keys.chain(cid), "pass_results") == "1"


def test_typed_arguments_are_converted_as_a_push_converts_them(r: redis.Redis, configured: Settings) -> None:
    order = typed_jobs.Order(
        id=uuid.uuid4(), total=Decimal("9.99"), ship_to={"street": "Main", "zip": "1234"}
    )
    step = typed_jobs.ship_strict.s(order)
    assert step.typed and step.args == (
        {"id": str(order.id), "total": "9.99", "ship_to": {"street": "Main", "zip": "1234"}},
    )
    assert cogworker.chain(chain_jobs.step.s("a"), step) is not None
    with pytest.raises(TypeError, match="pass its arguments by keyword"):
        cogworker.chain(chain_jobs.step.s("a"), step, pass_results=True)
    keyword = typed_jobs.ship_strict.s(order=order)
    assert cogworker.chain(chain_jobs.step.s("a"), keyword, pass_results=True) is not None


def test_a_chain_inside_a_batch_block_is_refused(r: redis.Redis, configured: Settings) -> None:
    with cogworker.batch(description="outer"), pytest.raises(TypeError, match="can't be a batch member"):
        cogworker.chain(chain_jobs.step.s("a"))
    assert r.keys(keys.chain("*")) == [] and r.llen(keys.queue("default")) == 0
