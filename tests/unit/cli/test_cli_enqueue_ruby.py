"""`cogworker enqueue` of a Ruby class name that no Python job has: pushed for Sidekiq, positional
arguments only, an explicit queue; a Python job's name (dotted, or `@job(name=...)`) is looked up as
before."""

from __future__ import annotations

import json

import pytest
import redis

from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.daemon_env import run_cogworker
from tests.support.redis_server import RedisServer


def jobs(r: redis.Redis, key: str) -> list[dict]:
    return [json.loads(raw) for raw in r.lrange(key, 0, -1)]


def test_a_ruby_class_is_pushed_by_name_with_no_warning(cli: CLI, r: redis.Redis) -> None:
    out = cli("enqueue", "Billing::InvoiceJob", "[1, 2]", "--queue", "ruby", "--json").json()
    assert out["ruby"] is True and out["warnings"] == [] and out["queue"] == "ruby"
    [job] = jobs(r, "cogworker:queue:ruby")
    assert (job["class"], job["args"], job["jid"], job["retry"]) == (
        "Billing::InvoiceJob",
        [1, 2],
        out["jid"],
        True,
    )
    assert "kwargs" not in job and "result_ttl" not in job
    text = cli("enqueue", "HardWorker", "[3]", "--queue", "ruby", "--in", "60")
    assert text.code == 0 and text.err == ""
    assert text.out.startswith("pushed HardWorker (a Ruby class: Sidekiq runs it) to queue ruby as ")
    [scheduled] = [json.loads(raw) for raw in r.zrange("cogworker:schedule", 0, -1)]
    assert scheduled["class"] == "HardWorker" and "at" not in scheduled


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("HardWorker", "[1]"), "give --queue, the queue Sidekiq reads it from"),
        (("HardWorker", "[1]", "--queue", "ruby", "--kwargs", '{"a": 1}'), "positional arguments only"),
        (("HardWorker", "[1]", "--queue", "bad queue"), "queue must be"),
    ],
)
def test_a_ruby_push_that_cant_be_made_is_a_usage_error(
    cli: CLI, r: redis.Redis, argv: tuple[str, ...], said: str
) -> None:
    out = cli("enqueue", *argv)
    assert out.code == 2, out  # exitcodes.USAGE
    assert said in out.err
    assert r.keys("cogworker:queue:*") == []


def test_a_python_job_with_a_ruby_style_name_keeps_its_own_options(
    cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REQUIRE", "named_push_jobs")
    out = cli("enqueue", "PyWorker", "[5]", "--json").json()
    assert out["ruby"] is False and out["resolved"] is True and out["queue"] == "python_side"
    [job] = jobs(r, "cogworker:queue:python_side")
    assert (job["class"], job["retry"]) == ("PyWorker", 4)


def test_a_dotted_name_is_still_a_python_job(cli: CLI, r: redis.Redis) -> None:
    out = cli("enqueue", "billing_app.jobs.charge", "[1]")
    assert out.code == 0 and "pushed by name, unchecked" in out.err
    assert "Ruby" not in out.out


def test_a_first_call_in_a_fresh_interpreter_in_the_sidekiq_mode(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    env = {"COGWORKER_REDIS_URL": redis_server.url, "COGWORKER_SIDEKIQ_COMPAT": "6"}
    done = run_cogworker(env, "enqueue", "HardWorker", "[1, 2]", "--queue", "ruby", "--json")
    assert done.returncode == 0, done.stderr
    jid = json.loads(done.stdout)["jid"]
    [job] = jobs(r, "queue:ruby")
    assert (job["jid"], job["class"], job["args"]) == (jid, "HardWorker", [1, 2])
    assert r.sismember("queues", "ruby")
