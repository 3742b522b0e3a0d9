"""`cogworker enqueue` against a real Redis."""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401


def only_job(r: redis.Redis, queue: str) -> dict:
    raws = r.lrange(f"cogworker:queue:{queue}", 0, -1)
    assert len(raws) == 1
    return json.loads(raws[0])


def test_enqueue_a_registered_job_with_its_own_options(
    cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REQUIRE", "demo_jobs")
    out = cli("enqueue", "demo_jobs.on_other", '["a"]', "--kwargs", '{"tag": 1}', "--json").json()
    assert out["resolved"] is True and out["warnings"] == []
    job = only_job(r, "other")  # @job(queue="other")
    assert (job["class"], job["args"], job["kwargs"], job["jid"]) == (
        "demo_jobs.on_other",
        ["a"],
        {"tag": 1},
        out["jid"],
    )
    assert r.sismember("cogworker:queues", "other")

    text = cli("enqueue", "demo_jobs.boom", '["x"]', "--queue", "urgent")
    assert text.code == 0 and text.out.startswith("pushed demo_jobs.boom to queue urgent as ")
    assert only_job(r, "urgent")["retry"] == 2  # @job(retry=2)


def test_enqueue_later(cli: CLI, r: redis.Redis) -> None:
    before = time.time()
    out = cli("enqueue", "demo_jobs.record", '["later"]', "--in", "60", "--json").json()
    [(raw, score)] = r.zrange("cogworker:schedule", 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == out["jid"]
    assert before + 59 < score < time.time() + 61
    assert out["at"] == pytest.approx(score)


def test_a_job_whose_module_is_not_importable_here_is_pushed_by_name_with_a_warning(
    cli: CLI, r: redis.Redis
) -> None:
    out = cli("enqueue", "billing_app.jobs.charge", "[1]")
    assert out.code == 0
    assert "warning: can't import 'billing_app.jobs'" in out.err
    assert "pushed by name, unchecked" in out.err
    job = only_job(r, "default")
    assert (job["class"], job["args"], job["retry"]) == ("billing_app.jobs.charge", [1], True)


def test_a_typo_in_an_importable_module_pushes_nothing(cli: CLI, r: redis.Redis) -> None:
    out = cli("enqueue", "demo_jobs.recrod", '["x"]')
    assert out.code == 1
    assert "'demo_jobs.recrod' is not a @job function" in out.err and "nothing pushed" in out.err
    assert r.keys("cogworker:*") == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["[1,"], "arguments are not valid JSON"),
        (['{"a": 1}'], "arguments must be a JSON array"),
        (["[1]", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
        (["[NaN]"], "arguments are not valid JSON"),
        (["[1]", "--in", "-5"], "--in must be a number of seconds"),
        (["[1]", "--queue", "has space"], "queue must be a non-empty name"),
    ],
)
def test_bad_arguments_are_usage_errors(cli: CLI, r: redis.Redis, argv: list[str], message: str) -> None:
    out = cli("enqueue", "demo_jobs.record", *argv)
    assert out.code == 2, out.err
    assert message in out.err
    assert r.keys("cogworker:*") == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad\udcffname", "the job name 'bad\\xffname' is not valid UTF-8"),
        ("", "the job name is empty"),
        ("  ", "the job name is empty"),
    ],
)
def test_a_name_no_payload_can_carry_is_a_usage_error(
    cli: CLI, r: redis.Redis, name: str, message: str
) -> None:
    out = cli("enqueue", name, "[1]")
    assert out.code == 2, out.err
    assert out.err.strip().startswith(f"cogworker: {message}")
    assert r.keys("cogworker:*") == []
