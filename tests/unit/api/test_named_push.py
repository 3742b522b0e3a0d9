"""Pushes for Ruby classes (`push_named`, `ruby_job`) against a real Redis: the payload Sidekiq reads,
positional arguments only, nothing registered, and the first call of a fresh interpreter."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from typing import Any

import pytest
import redis

import cogworker
from cogworker.api import registry
from cogworker.api.named_push import is_ruby_name
from cogworker.settings import Settings
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer


def queue(r: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The queue's jobs, oldest first (pushes go to the left end)."""
    return [json.loads(raw) for raw in reversed(r.lrange(f"cogworker:queue:{name}", 0, -1))]


def test_push_named_writes_what_sidekiq_reads(r: redis.Redis, configured: Settings) -> None:
    jid = cogworker.push_named("HardWorker", [1, "two", {"x": [3]}], queue="ruby")
    [job] = queue(r, "ruby")
    assert job["jid"] == jid and len(jid) == 24
    assert job["class"] == "HardWorker"
    assert job["args"] == [1, "two", {"x": [3]}]
    assert job["queue"] == "ruby" and job["retry"] is True
    assert "kwargs" not in job and "at" not in job
    # No option of cogworker's own rides in it: Ruby would not honour one.
    assert set(job) == {"class", "jid", "args", "queue", "retry", "created_at", "enqueued_at"}
    assert r.sismember("cogworker:queues", "ruby")
    assert not registry.is_registered("HardWorker")


def test_retry_and_a_namespaced_class(r: redis.Redis, configured: Settings) -> None:
    cogworker.push_named("Billing::InvoiceJob", (7,), queue="ruby", retry=False)
    cogworker.push_named("Billing::InvoiceJob", [], queue="ruby", retry=3)
    assert [(j["class"], j["args"], j["retry"]) for j in queue(r, "ruby")] == [
        ("Billing::InvoiceJob", [7], False),
        ("Billing::InvoiceJob", [], 3),
    ]


def test_run_in_and_at_go_to_the_schedule_set_without_at(r: redis.Redis, configured: Settings) -> None:
    soon = cogworker.push_named("HardWorker", [1], queue="ruby", run_in=dt.timedelta(minutes=5))
    later = cogworker.push_named("HardWorker", [2], queue="ruby", at=time.time() + 3600)
    entries = {
        json.loads(raw)["jid"]: (json.loads(raw), score)
        for raw, score in r.zrange("cogworker:schedule", 0, -1, withscores=True)
    }
    assert set(entries) == {soon, later}
    for job, score in entries.values():
        assert "at" not in job and score > time.time()
    assert entries[later][1] - entries[soon][1] > 3000
    with pytest.raises(TypeError, match="run_in or at, not both"):
        cogworker.push_named("HardWorker", [], queue="ruby", run_in=5, at=time.time())


@pytest.mark.parametrize(
    ("name", "ruby"),
    [
        ("HardWorker", True),
        ("Foo::BarJob", True),
        ("A1::B_2::C", True),
        ("myapp.jobs.send", False),
        ("hardWorker", False),
        ("Foo::", False),
        ("::Foo", False),
        ("Foo:Bar", False),
        ("Foo Bar", False),
        ("", False),
    ],
)
def test_ruby_names(name: str, ruby: bool) -> None:
    assert is_ruby_name(name) is ruby


def test_refusals_name_what_is_wrong(r: redis.Redis, configured: Settings) -> None:
    with pytest.raises(TypeError, match="not a Ruby class name"):
        cogworker.push_named("myapp.jobs.send", [1], queue="ruby")
    with pytest.raises(TypeError, match="not JSON-native"):
        cogworker.push_named("HardWorker", [object()], queue="ruby")
    with pytest.raises(TypeError, match="args must be a list"):
        cogworker.push_named("HardWorker", "abc", queue="ruby")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="queue"):
        cogworker.push_named("HardWorker", [], queue="bad queue")
    with pytest.raises(TypeError):
        cogworker.push_named("HardWorker", [1])  # type: ignore[call-arg]  # no default queue
    assert r.llen("cogworker:queue:ruby") == 0


def test_a_ruby_job_takes_positional_arguments_only(r: redis.Redis, configured: Settings) -> None:
    hard_worker = cogworker.ruby_job("HardWorker", queue="ruby")
    jid = hard_worker.perform_async(1, 2)
    with pytest.raises(TypeError) as err:
        hard_worker.perform_async(1, b=2)  # type: ignore[call-arg]
    assert "HardWorker runs in Ruby, which takes positional arguments only" in str(err.value)
    assert "b" in str(err.value)
    with pytest.raises(TypeError, match="positional arguments only"):
        hard_worker.perform_in(60, 1, b=2)  # type: ignore[call-arg]
    [job] = queue(r, "ruby")
    assert (job["jid"], job["args"], job["class"]) == (jid, [1, 2], "HardWorker")
    assert not registry.is_registered("HardWorker")
    with pytest.raises(TypeError):
        hard_worker(1)  # type: ignore[operator]  # not a function: nothing here can run it


def test_a_ruby_jobs_set_perform_in_and_at(r: redis.Redis, configured: Settings) -> None:
    hard_worker = cogworker.ruby_job("HardWorker", queue="ruby", retry=5)
    hard_worker.set(queue="ruby_low").perform_async(1)
    hard_worker.set(retry=False).perform_at(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), 2)
    hard_worker.perform_in(120, 3)
    [low] = queue(r, "ruby_low")
    assert (low["retry"], low["args"]) == (5, [1])
    scheduled = sorted(
        (json.loads(raw) for raw in r.zrange("cogworker:schedule", 0, -1)), key=lambda j: j["args"]
    )
    assert [(j["args"], j["retry"], j["queue"]) for j in scheduled] == [
        ([2], False, "ruby"),
        ([3], 5, "ruby"),
    ]
    assert repr(hard_worker) == "<ruby job HardWorker queue=ruby>"
    with pytest.raises(TypeError, match="not a Ruby class name"):
        cogworker.ruby_job("hard_worker", queue="ruby")


def test_awaitable_pushes(r: redis.Redis, configured: Settings) -> None:
    async def main() -> list[str | None]:
        hard_worker = cogworker.ruby_job("HardWorker", queue="ruby")
        jids = [
            await cogworker.aio.push_named("HardWorker", [1], queue="ruby"),
            await hard_worker.aio.perform_async(2),
        ]
        with pytest.raises(TypeError, match="positional arguments only"):
            await hard_worker.aio.perform_async(3, x=1)  # type: ignore[call-arg]
        await cogworker.aio.close()
        return jids

    jids = asyncio.run(main())
    assert [(j["jid"], j["args"]) for j in queue(r, "ruby")] == list(zip(jids, [[1], [2]], strict=True))


def test_status_all_writes_no_status_for_a_ruby_job(r: redis.Redis, settings: Settings) -> None:
    cogworker.configure(settings.model_copy(update={"status_all": True}))
    try:
        jid = cogworker.push_named("HardWorker", [1], queue="ruby")
        [job] = queue(r, "ruby")
        assert job["status"] is False
        assert not [key for key in r.keys("cogworker:status:*") if jid in key.decode()]
    finally:
        cogworker.configure(settings)


def test_the_fake_testing_mode_records_a_named_push(configured: Settings) -> None:
    with cogworker.testing.fake():
        jid = cogworker.ruby_job("HardWorker", queue="ruby").perform_async(1)
        assert [j["jid"] for j in cogworker.testing.jobs_for("HardWorker")] == [jid]
        cogworker.testing.clear_all()


def test_a_first_call_in_the_sidekiq_mode_writes_bare_keys(redis_server: RedisServer, r: redis.Redis) -> None:
    """A fresh interpreter configured only by the environment, its first call a named push."""
    jid = first_call(
        """
        import cogworker
        print(cogworker.push_named("HardWorker", [1, 2], queue="ruby"))
        """,
        redis_server.url,
        COGWORKER_SIDEKIQ_COMPAT="6",
    )
    [raw] = r.lrange("queue:ruby", 0, -1)
    job = json.loads(raw)
    assert (job["jid"], job["class"], job["args"]) == (jid, "HardWorker", [1, 2])
    assert "kwargs" not in job
    assert r.sismember("queues", "ruby")


def test_a_python_worker_never_imports_anything_for_a_ruby_class() -> None:
    """A Ruby class that reached a Python queue: the worker files it as failing with JobNotFound
    (its retry policy, then dead), and resolves nothing by import for it."""
    with pytest.raises(registry.JobNotFound, match="not a registered job"):
        registry.resolve("Billing::InvoiceJob", allowed=("Billing", "billing"))
