"""Payloads crossing between a cogworker worker in the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT=6) and a
real Sidekiq 6.4 on one Redis, with bare keys and with a Sidekiq 6 namespace:

- a job failing on one side, then the other, and so on (each side's poller graduating the other's
  retry) ends in the dead set with its count, from either side's start, and is never lost;
- a job cogworker scheduled (perform_in) is enqueued by Sidekiq's poller and run by Ruby, and neither
  the schedule entry nor the payload Ruby runs has `at` or an empty `kwargs`;
- `retry: false` is discarded by cogworker as by Sidekiq: death hooks on each side, counted failed, in
  no set;
- a Ruby job carrying a Sidekiq Pro `bid` runs in cogworker as an ordinary job, touching no batch key of
  cogworker's, and its retry entry keeps the `bid` as it came.

Each side runs alone while it has its turn (a process started, waited on, stopped), so which side ran
each attempt is known.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sidekiq_payload_jobs as jobs

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import shards
from tests.support.paths import APP_DIR
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sidekiq import SidekiqProcess, ruby
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow

PEER = APP_DIR / "sidekiq_peer.rb"
RUBY_JOBS = APP_DIR / "sidekiq_payload_jobs.rb"
PRO_BID = "kQz2-Vb_9XmA1w"  # a Sidekiq Pro bid: SecureRandom.urlsafe_base64(10)


class Side:
    """The shared keys' start, and how to run each side against them."""

    def __init__(self, namespace: str, url: str, workers: WorkerPool, logs: Path) -> None:
        self.start = f"{namespace}:" if namespace else ""
        self.url = url
        self.workers = workers
        self.logs = logs
        self.ruby_env = {"SIDEKIQ_JOBS": str(RUBY_JOBS), "SIDEKIQ_NAMESPACE": namespace}
        self.worker_env = {
            "COGWORKER_SIDEKIQ_COMPAT": "6",
            "COGWORKER_SIDEKIQ_NAMESPACE": namespace,
            "COGWORKER_REQUIRE": "sidekiq_payload_jobs",
            "COGWORKER_POLL_INTERVAL_S": "0.1",
        }
        self.runs = 0

    def key(self, name: str) -> str:
        return self.start + name

    def deaths(self, turn: str) -> str:
        """The list each side's death handlers note deaths on (Ruby's under the namespace)."""
        return self.key("payload-test:ruby-deaths") if turn == "ruby" else "payload-test:python-deaths"

    def ruby(self, script: str) -> str:
        return ruby(script, self.url, app=PEER, env=self.ruby_env)

    def run_python(self, queues: str, until: Any, message: str) -> list[dict[str, Any]]:
        """A cogworker worker reading `queues` until `until()`; its log events."""
        worker = self.workers.start(COGWORKER_QUEUES=queues, **self.worker_env)
        wait_until(until, timeout=45, message=f"{message}:\n{worker.log_text()[-3000:]}")
        assert worker.stop() == 0
        return worker.events()

    def run_ruby(self, queues: tuple[str, ...], until: Any, message: str) -> str:
        """A Sidekiq reading `queues` until `until()`; its log."""
        self.runs += 1
        log = self.logs / f"sidekiq-{self.runs}.log"
        with SidekiqProcess(self.url, log, app=PEER, queues=queues, env=self.ruby_env) as sidekiq:
            wait_until(until, timeout=90, message=f"{message}:\n{sidekiq.log_text()[-3000:]}")
            assert sidekiq.stop() == 0
            text = sidekiq.log_text()
        assert "Internal exception" not in text
        return text


@pytest.fixture(params=["", "rails"], ids=["bare", "namespace"])
def side(
    request: pytest.FixtureRequest,
    r: redis.Redis,
    redis_server: RedisServer,
    workers: WorkerPool,
    tmp_path: Path,
) -> Iterator[Side]:
    namespace = str(request.param)
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat="6", sidekiq_namespace=namespace)
    cw_client.configure(settings)  # this test's own pushes go to the shared keys too
    yield Side(namespace, redis_server.url, workers, tmp_path)
    shards.use_settings(load_settings())


def entries(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.zrange(key, 0, -1)]


def due_now(r: redis.Redis, key: str) -> None:
    """Every entry of the set due at once, for the next side's poller."""
    for raw in r.zrange(key, 0, -1):
        r.zadd(key, {raw: 0}, xx=True)


def where_is(r: redis.Redis, side: Side, jid: str) -> list[str]:
    """Every place the job is in: exactly one, or it was lost or copied."""
    found = [
        name
        for name in ("retry", "dead", "schedule")
        if any(e["jid"] == jid for e in entries(r, side.key(name)))
    ]
    for queue in ("pingpong", "py", "rb", "default"):
        found += [
            f"queue:{queue}"
            for raw in r.lrange(side.key(f"queue:{queue}"), 0, -1)
            if json.loads(raw)["jid"] == jid
        ]
    return found


@pytest.mark.parametrize("first", ["python", "ruby"])
def test_a_job_failing_on_both_sides_ends_dead_and_is_never_lost(
    r: redis.Redis, side: Side, first: str
) -> None:
    if first == "python":
        jid = jobs.ping_pong.perform_async(1)
        turns = ["python", "ruby", "python"]
    else:
        jid = side.ruby("print PingPongJob.perform_async(1)")
        turns = ["ruby", "python", "ruby"]
    for count, turn in enumerate(turns):
        last = count == len(turns) - 1

        def filed(count: int = count, last: bool = last, turn: str = turn) -> bool:
            if last:  # in dead, and the death handlers of the side it died on have run
                dead = any(e["jid"] == jid for e in entries(r, side.key("dead")))
                return dead and r.llen(side.deaths(turn)) == 1
            return [e.get("retry_count") for e in entries(r, side.key("retry"))] == [count]

        due_now(r, side.key("retry"))
        if turn == "python":
            side.run_python("pingpong", filed, f"attempt {count + 1} failed in cogworker")
        else:
            side.run_ruby(("pingpong",), filed, f"attempt {count + 1} failed in Sidekiq")
        assert where_is(r, side, jid) == ["dead" if last else "retry"]
        entry = next(e for e in entries(r, side.key("dead" if last else "retry")) if e["jid"] == jid)
        assert "at" not in entry and "kwargs" not in entry
    (dead,) = entries(r, side.key("dead"))
    assert dead["retry_count"] == 2 and dead["retry"] == 2
    assert dead["error_class"] == ("RuntimeError" if turns[-1] == "ruby" else "ValueError")
    # The death handlers of the side it died on ran, and only those.
    deaths = {
        "ruby": r.lrange(side.deaths("ruby"), 0, -1),
        "python": r.lrange(side.deaths("python"), 0, -1),
    }
    assert len(deaths[turns[-1]]) == 1 and deaths["ruby" if turns[-1] == "python" else "python"] == []
    # Sidekiq ran what cogworker filed as it was: no empty kwargs in any payload it ran.
    ran = [json.loads(raw) for raw in r.lrange(side.key("payload-test:ran"), 0, -1)]
    assert ran and all("kwargs" not in job and "at" not in job for job in ran)


def test_a_job_cogworker_scheduled_is_enqueued_by_sidekiqs_poller_and_run_by_ruby(
    r: redis.Redis, side: Side
) -> None:
    jid = jobs.later.perform_in(1, 7)
    (scheduled,) = entries(r, side.key("schedule"))
    assert scheduled["jid"] == jid and "at" not in scheduled and "kwargs" not in scheduled
    text = side.run_ruby(
        ("rb",), lambda: r.llen(side.key("payload-test:ran")) == 1, "Sidekiq ran the scheduled job"
    )
    (ran,) = [json.loads(raw) for raw in r.lrange(side.key("payload-test:ran"), 0, -1)]
    assert ran["jid"] == jid and ran["class"] == "LaterJob" and ran["args"] == [7]
    assert "at" not in ran and "kwargs" not in ran
    assert where_is(r, side, jid) == [] and "LaterJob" in text


def test_retry_false_is_discarded_by_cogworker_as_by_sidekiq(r: redis.Redis, side: Side) -> None:
    in_python = side.ruby('print DiscardJob.set(queue: "py").perform_async(1)')
    events = side.run_python(
        "py", lambda: r.llen("payload-test:python-deaths") == 1, "discarded in cogworker"
    )
    assert json.loads(r.lindex("payload-test:python-deaths", 0) or "{}") == {
        "jid": in_python,
        "cause": "failed",
    }
    assert [e["to"] for e in events if e.get("event") == "job_discarded"] == ["discarded"]
    assert where_is(r, side, in_python) == [] and r.get(side.key("stat:failed")) == "1"

    in_ruby = side.ruby("print DiscardJob.perform_async(2)")
    side.run_ruby(("default",), lambda: r.llen(side.deaths("ruby")) == 1, "discarded in Sidekiq")
    assert r.lrange(side.deaths("ruby"), 0, -1) == [in_ruby]
    assert where_is(r, side, in_ruby) == [] and r.get(side.key("stat:failed")) == "2"
    assert r.zcard(side.key("dead")) == 0 and r.zcard(side.key("retry")) == 0


def test_a_ruby_job_with_a_sidekiq_pro_bid_runs_in_cogworker_untouched(r: redis.Redis, side: Side) -> None:
    push = (
        'print Sidekiq::Client.push("class" => "ProBatchJob", "queue" => "py", "args" => [%d], "bid" => "%s")'
    )
    ok, failing = side.ruby(push % (1, PRO_BID)), side.ruby(push % (-1, PRO_BID))
    side.run_python(
        "py", lambda: r.zcard(side.key("retry")) == 1 and r.llen("payload-test:pro-runs") == 2, "both ran"
    )
    assert sorted(json.loads(raw) for raw in r.lrange("payload-test:pro-runs", 0, -1)) == [
        [-1, None],
        [1, None],
    ]
    (retried,) = entries(r, side.key("retry"))
    assert retried["jid"] == failing and retried["bid"] == PRO_BID and retried["retry"] is True
    assert where_is(r, side, ok) == [] and r.get(side.key("stat:processed")) == "1"
    assert [k for k in r.keys("*") if "batch" in k] == []  # no batch key of cogworker's (nor any)
