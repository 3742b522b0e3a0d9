"""`result_ttl` and `cogworker.result`: the option's and the call's checks, the default setting, the
records read back from Redis, and results in the testing modes (kept in memory)."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import pytest
import redis
import result_jobs

import cogworker
from cogworker import job, testing
from cogworker.api import client, results
from cogworker.settings import ConfigError, Settings, load_settings
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerPool


@job(result_ttl=5)
def doubled(x: int) -> int:
    return 2 * x


@job(result_ttl=5)
def odd_value() -> Any:
    return {"ok": [1, {2, 3}]}


@job(result_ttl=5)
def raises() -> None:
    raise LookupError("nope")


@job(result_ttl=5)
async def async_doubled(x: int) -> int:
    return 2 * x


@pytest.mark.parametrize("bad", [-1, "10", True, math.nan, math.inf, 11 * 365 * 24 * 3600, [5]])
def test_result_ttl_must_be_seconds_or_zero(bad: Any) -> None:
    with pytest.raises(TypeError, match="result_ttl must be seconds"):
        job(result_ttl=bad)
    with pytest.raises(TypeError, match="result_ttl must be seconds"):
        result_jobs.plain.set(result_ttl=bad)


def test_result_ttl_travels_in_the_payload(configured: Settings, r: redis.Redis) -> None:
    with testing.fake():
        result_jobs.plain.set(result_ttl=2.5).perform_async(1)
        result_jobs.plain.perform_async(2)
        result_jobs.plain.set(result_ttl=0).perform_async(3)
        pushed = [j.get("result_ttl") for j in result_jobs.plain.jobs]
    assert pushed == [2.5, None, 0]


def test_the_default_setting_is_decided_at_push(settings: Settings, r: redis.Redis) -> None:
    client.configure(settings.model_copy(update={"result_ttl_s": 7.0}))
    try:
        with testing.fake():
            result_jobs.plain.perform_async(1)
            result_jobs.plain.set(result_ttl=3).perform_async(2)
            result_jobs.plain.set(result_ttl=0).perform_async(3)
            pushed = [j.get("result_ttl") for j in result_jobs.plain.jobs]
    finally:
        client.configure(settings)
    assert pushed == [7.0, 3, 0]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "abc"])
def test_a_bad_default_setting_is_a_config_error(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_RESULT_TTL_S", value)
    with pytest.raises(ConfigError, match="COGWORKER_RESULT_TTL_S"):
        load_settings()


def test_ttl_s_reads_only_what_a_push_writes() -> None:
    assert results.ttl_s({"result_ttl": 3}) == 3.0
    for odd in (None, 0, -1, True, "5", math.nan, [1]):
        assert results.ttl_s({"result_ttl": odd}) is None
    assert results.ttl_s({}) is None
    assert results.ttl_s({"result_ttl": 1e12}) == results.MAX_TTL_S


def test_bad_arguments_to_result_name_the_argument(configured: Settings) -> None:
    with pytest.raises(TypeError, match="jid must be a str, not int"):
        cogworker.result(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="jid must not be empty"):
        cogworker.result("")
    with pytest.raises(ValueError, match="timeout must be 0 or more seconds"):
        cogworker.result("abc", timeout=-1)
    with pytest.raises(ValueError, match="timeout must be 0 or more seconds"):
        cogworker.result("abc", timeout=math.nan)
    with pytest.raises(TypeError, match="timeout must be seconds"):
        cogworker.result("abc", timeout="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout must be seconds"):
        cogworker.result("abc", timeout=True)


def test_records_in_redis_are_read_back(configured: Settings, r: redis.Redis) -> None:
    results.store(r, "j1", results.success_record("x", {"a": [1, None]}), 5)
    results.store(r, "j2", results.failure_record({"error_class": "ValueError", "error_message": "m"}), 5)
    assert cogworker.result("j1", timeout=0) == {"a": [1, None]}
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result("j2", timeout=0)
    assert (failed.value.jid, failed.value.error_class, failed.value.error_message) == (
        "j2",
        "ValueError",
        "m",
    )
    assert 0 < r.pttl("cogworker:result:j1") <= 5000
    r.set("cogworker:result:j3", '"not a record"')
    with pytest.raises(ValueError, match="not a cogworker result record"):
        cogworker.result("j3", timeout=0)


def test_a_result_written_while_waiting_is_received(configured: Settings, r: redis.Redis) -> None:
    writer = threading.Timer(0.3, lambda: results.store(r, "late", results.success_record("x", 42), 5))
    writer.start()
    started = time.monotonic()
    assert cogworker.result("late", timeout=10) == 42
    assert time.monotonic() - started < 5
    writer.join()


def test_a_value_json_cant_hold_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError) as error:
        results.success_record("app.job", {"ok": [1, {2, 3}]})
    message = str(error.value)
    assert message.startswith("job app.job keeps its result (result_ttl)")
    assert message.endswith("return value['ok'][1]: set is not JSON-native")


def test_inline_mode_keeps_results_in_memory() -> None:
    with testing.inline():
        jid = doubled.perform_async(21)
        async_jid = async_doubled.perform_async(4)
        assert jid is not None and async_jid is not None
        assert cogworker.result(jid, timeout=0) == 42
        assert cogworker.result(async_jid, timeout=0) == 8
        with pytest.raises(LookupError):
            raises.perform_async()
        with pytest.raises(cogworker.ResultTimeout):
            cogworker.result("unknown", timeout=0.05)
    with testing.inline(), pytest.raises(cogworker.ResultTimeout):  # leaving the mode forgot them
        cogworker.result(jid, timeout=0)


def test_fake_mode_keeps_results_of_what_drain_ran() -> None:
    with testing.fake():
        jid = doubled.perform_async(5)
        failing = raises.perform_async()
        odd = odd_value.perform_async()
        assert jid is not None and failing is not None and odd is not None
        with pytest.raises(cogworker.ResultTimeout):
            cogworker.result(jid, timeout=0)  # not run yet
        doubled.drain()
        assert cogworker.result(jid, timeout=0) == 10
        with pytest.raises(LookupError):
            raises.drain()
        with pytest.raises(cogworker.JobFailed) as failed:
            cogworker.result(failing, timeout=0)
        assert (failed.value.error_class, failed.value.error_message) == ("LookupError", "nope")
        with pytest.raises(TypeError, match="set is not JSON-native"):
            odd_value.drain()
        with pytest.raises(cogworker.JobFailed, match="TypeError"):
            cogworker.result(odd, timeout=0)


def test_fake_mode_result_waits_for_a_drain_on_another_thread() -> None:
    with testing.fake():
        jid = doubled.perform_async(8)
        assert jid is not None
        drainer = threading.Timer(0.2, doubled.drain)
        drainer.start()
        assert cogworker.result(jid, timeout=10) == 16
        drainer.join()


def test_result_as_the_first_call_of_a_fresh_interpreter(
    r: redis.Redis, redis_server: RedisServer, workers: WorkerPool
) -> None:
    """A new user's script, configured only by COGWORKER_* variables: push, then wait for the result
    a real worker writes; a failure and a timeout as they see them."""
    workers.start(COGWORKER_REQUIRE="result_jobs", COGWORKER_POLL_INTERVAL_S="0.1")
    code = """
        import json, cogworker
        from result_jobs import add, boom
        out = {"value": cogworker.result(add.perform_async(20, 22), timeout=15)}
        try:
            cogworker.result(boom.perform_async("first"), timeout=15)
        except cogworker.JobFailed as exc:
            out["failed"] = [exc.error_class, exc.error_message]
        try:
            cogworker.result("no-such-jid", timeout=0.2)
        except cogworker.ResultTimeout as exc:
            out["timeout"] = isinstance(exc, TimeoutError)
        print(json.dumps(out))
    """
    out = first_call(code, redis_server.url, timeout=40)
    assert json.loads(out) == {
        "value": {"sum": 42, "parts": [20, 22]},
        "failed": ["ValueError", "first"],
        "timeout": True,
    }
    assert len(r.keys("cogworker:result:*")) == 2
