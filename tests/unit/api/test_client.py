"""The job API and client against a real Redis: payloads, scheduling, bulk pushes, validation."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

import pytest
import redis

import cogworker
from cogworker import job
from cogworker.api import middleware
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401


@job(queue="mailers", retry=5)
def send_email(user_id: int, template: str) -> None:
    pass


@job
def plain(*args: Any, **kwargs: Any) -> None:
    pass


def queue(r: redis.Redis, name: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(f"cogworker:queue:{name}", 0, -1)]


def test_perform_async_writes_the_payload(r: redis.Redis, configured: object) -> None:
    jid = send_email.perform_async(42, "welcome")
    [payload] = queue(r, "mailers")
    assert payload["jid"] == jid
    assert payload["class"] == "tests.unit.api.test_client.send_email"
    assert payload["args"] == [42, "welcome"]
    assert "kwargs" not in payload  # empty: left out, as Sidekiq's payloads have none
    assert payload["queue"] == "mailers"
    assert payload["retry"] == 5
    assert payload["created_at"] <= payload["enqueued_at"] <= time.time()
    assert r.smembers("cogworker:queues") == {"mailers"}


@job(name="NoopJob")
def noop_job() -> None:
    pass


def test_a_stored_job_is_no_bigger_than_sidekiqs_of_the_same_job(r: redis.Redis, configured: object) -> None:
    """Redis bytes per queued job (the backlog curve): no more than Sidekiq 6.4's entry for the same
    job, which Sidekiq writes as compact JSON with these fields and the same float times."""
    noop_job.perform_async()
    [raw] = r.lrange("cogworker:queue:default", 0, -1)
    ours = json.loads(raw)
    sidekiqs = {
        "retry": True,
        "queue": "default",
        "args": [],
        "class": "NoopJob",
        "jid": ours["jid"],
        "created_at": ours["created_at"],
        "enqueued_at": ours["enqueued_at"],
    }
    assert len(raw.encode()) <= len(json.dumps(sidekiqs, separators=(",", ":")))


def test_kwargs_and_set_override(r: redis.Redis, configured: object) -> None:
    send_email.set(queue="critical", retry=False).perform_async(7, template="x")
    [payload] = queue(r, "critical")
    assert payload["args"] == [7]
    assert payload["kwargs"] == {"template": "x"}
    assert payload["retry"] is False
    assert queue(r, "mailers") == []


def test_perform_in_and_at_go_to_the_schedule(r: redis.Redis, configured: object) -> None:
    before = time.time()
    send_email.perform_in(60, 1, "a")
    send_email.perform_in(dt.timedelta(minutes=2), 2, "b")
    when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    send_email.perform_at(when, 3, "c")
    send_email.perform_at(time.time() + 30, 4, "d")
    entries = r.zrange("cogworker:schedule", 0, -1, withscores=True)
    scores = sorted(score for _, score in entries)
    assert len(entries) == 4
    assert before + 29 < scores[0] < before + 31
    assert before + 59 < scores[1] < before + 61
    assert before + 119 < scores[2] < before + 121
    assert abs(scores[3] - when.timestamp()) < 0.01
    # As Sidekiq's client stores them: the score is the time, and the entry has no `at`.
    assert all("at" not in json.loads(raw) for raw, _ in entries)
    assert queue(r, "mailers") == []


def test_perform_at_in_the_past_enqueues_now(r: redis.Redis, configured: object) -> None:
    send_email.perform_at(time.time() - 10, 1, "late")
    assert len(queue(r, "mailers")) == 1
    assert "at" not in queue(r, "mailers")[0]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, {"when": dt.datetime.now()}), {}, "args[1]['when']: datetime is not JSON-native"),
        ((object(),), {}, "args[0]: object is not JSON-native"),
        ((), {"ids": {1, 2}}, "kwargs['ids']: set is not JSON-native"),
        (([1, (2, 3)],), {}, "args[0][1]: tuple is not JSON-native"),
        (({1: "a"},), {}, "args[0]: key 1 is int, JSON object keys must be str"),
        ((float("nan"),), {}, "args[0]: nan is not JSON-native"),
    ],
)
def test_arguments_must_be_json_native(
    r: redis.Redis, configured: object, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError) as err:
        plain.perform_async(*args, **kwargs)
    assert message in str(err.value)
    assert r.dbsize() == 0


def test_bad_options_and_times_are_type_errors(configured: object) -> None:
    with pytest.raises(TypeError, match="queue"):
        plain.set(queue="has space")
    with pytest.raises(TypeError, match="retry"):
        plain.set(retry=-1)
    with pytest.raises(TypeError, match="unknown job option"):
        plain.set(priority=3)
    with pytest.raises(TypeError, match="aware datetime"):
        plain.perform_at(dt.datetime.now())
    with pytest.raises(TypeError, match="perform_in"):
        plain.perform_in("soon")  # type: ignore[arg-type]


def test_push_bulk_is_one_round_trip_per_thousand(r: redis.Redis, configured: object) -> None:
    r.config_resetstat()
    jids = cogworker.push_bulk(send_email, [(i, "t") for i in range(2500)])
    assert len(jids) == 2500 and len(set(jids)) == 2500
    stats = r.info("commandstats")
    assert stats["cmdstat_lpush"]["calls"] == 3  # batches of 1,000, 1,000 and 500
    assert r.llen("cogworker:queue:mailers") == 2500
    # Oldest first at the popped (right) end.
    assert json.loads(r.lindex("cogworker:queue:mailers", -1))["args"] == [0, "t"]


def test_push_bulk_checks_everything_before_writing(r: redis.Redis, configured: object) -> None:
    with pytest.raises(TypeError, match=r"args\[0\]: bytes"):
        cogworker.push_bulk(send_email, [(1, "ok"), (b"bad", "x")])
    assert r.dbsize() == 0


def test_push_bulk_takes_a_job_set_with_options_for_the_whole_batch(
    r: redis.Redis, configured: object
) -> None:
    jids = cogworker.push_bulk(send_email.set(queue="bulk", retry=2), [(1, "a"), (2, "b")])
    pushed = [json.loads(raw) for raw in r.lrange("cogworker:queue:bulk", 0, -1)]
    assert sorted(job["jid"] for job in pushed) == sorted(jids)
    assert {job["retry"] for job in pushed} == {2}
    with pytest.raises(TypeError, match="push_bulk takes a job"):
        cogworker.push_bulk(print, [(1,)])  # type: ignore[arg-type]


def test_push_bulk_scheduled(r: redis.Redis, configured: object) -> None:
    at = time.time() + 100
    cogworker.push_bulk(send_email, [(1, "a"), (2, "b")], at=at)
    entries = r.zrange("cogworker:schedule", 0, -1, withscores=True)
    assert len(entries) == 2
    assert all(abs(score - at) < 0.01 and "at" not in json.loads(raw) for raw, score in entries)


def test_client_middleware_still_sees_a_scheduled_jobs_at(r: redis.Redis, configured: object) -> None:
    seen: list[object] = []

    def look(job_: dict[str, Any], call_next: Any) -> Any:
        seen.append(job_.get("at"))
        return call_next(job_)

    cogworker.client_chain.add(look)
    try:
        at = time.time() + 100
        send_email.perform_at(at, 1, "a")
    finally:
        cogworker.client_chain.remove(look)
    assert seen == [at]
    [(raw, score)] = r.zrange("cogworker:schedule", 0, -1, withscores=True)
    assert score == at and "at" not in json.loads(raw)


def test_client_middleware_can_change_and_stop_pushes(r: redis.Redis, configured: object) -> None:
    seen: list[str] = []

    def tag(job_: dict[str, Any], call_next: Any) -> Any:
        job_["tagged"] = True
        return call_next(job_)

    def stop_user_13(job_: dict[str, Any], call_next: Any) -> Any:
        seen.append(job_["jid"])
        if job_["args"] and job_["args"][0] == 13:
            return None
        return call_next(job_)

    middleware.client_chain.add(tag)
    middleware.client_chain.add(stop_user_13)
    assert send_email.perform_async(13, "x") is None
    assert send_email.perform_async(14, "x") is not None
    jids = cogworker.push_bulk(send_email, [(13, "y"), (15, "y")])
    assert jids[0] is None and jids[1] is not None
    assert [p["args"][0] for p in queue(r, "mailers")] == [15, 14]
    assert all(p["tagged"] for p in queue(r, "mailers"))
    assert len(seen) == 4


def test_jobs_defined_inside_functions_must_be_named() -> None:
    with pytest.raises(TypeError, match="importable"):

        @job
        def local() -> None:
            pass

    @job(name="tests.named_local")
    def named() -> None:
        pass

    assert named.name == "tests.named_local"


def test_a_job_in_a_module_run_with_dash_m_keeps_its_importable_name(
    tmp_path, r: redis.Redis, settings
) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "runnable_app.py").write_text(
        "from cogworker import job\n@job\ndef hello() -> None: ...\nprint(hello.name)\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    as_module = subprocess.run(
        [sys.executable, "-m", "runnable_app"], env=env, capture_output=True, text=True
    )
    assert as_module.stdout.strip() == "runnable_app.hello", as_module.stderr
    as_script = subprocess.run(
        [sys.executable, str(tmp_path / "runnable_app.py")], env=env, capture_output=True, text=True
    )
    assert as_script.returncode != 0
    assert "defined in a script run as __main__" in as_script.stderr


BAD_QUEUE_NAMES = [
    "a:b",
    "a,b",
    "has space",
    "tab\there",
    "",
    "nl\n",
    "nul\x00",
    "esc\x1b[31m",
    "nbsp\u00a0x",
]
GOOD_QUEUE_NAMES = ["mailers", "a-b.c/d", "ünïcode", "q*", "UPPER_1"]


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
def test_a_queue_no_worker_could_read_is_refused_at_every_push(
    r: redis.Redis, configured: object, name: str
) -> None:
    from cogworker.settings import ConfigError, load_settings

    shown = repr(name)
    with pytest.raises(TypeError) as err:
        job(queue=name)(plain.func)
    assert shown in str(err.value)
    with pytest.raises(TypeError, match=re.escape(shown)):
        plain.set(queue=name)
    with pytest.raises(TypeError, match=re.escape(shown)):
        send_email.set(retry=1).set(queue=name)
    with pytest.raises(TypeError, match=re.escape(shown)):
        cogworker.push_bulk(plain, [(1,)], queue=name)
    with pytest.raises(TypeError, match=re.escape(shown)):
        cogworker.periodic("0 * * * *", queue=name)
    assert r.dbsize() == 0
    # COGWORKER_QUEUES splits on , and : and strips whitespace around a name; the rest is refused.
    if name == name.strip() and name and "," not in name and ":" not in name:
        with pytest.raises(ConfigError, match="not a queue name"):
            load_settings(queues=name)


@pytest.mark.parametrize("name", GOOD_QUEUE_NAMES)
def test_a_queue_a_push_accepts_can_be_configured(r: redis.Redis, configured: object, name: str) -> None:
    from cogworker.settings import load_settings

    cogworker.push_bulk(plain, [(1,)], queue=name)
    plain.set(queue=name).perform_async(2)
    assert len(queue(r, name)) == 2
    assert load_settings(queues=f"{name}:2,other:1").queue_spec.names == (name, "other")


def test_cogworker_enqueue_refuses_a_queue_name_with_a_colon(cli: CLI, r: redis.Redis) -> None:
    out = cli("enqueue", "demo_jobs.record", '["x"]', "--queue", "a:b")
    assert out.code == 2 and "'a:b'" in out.err
    assert r.keys("cogworker:*") == []
