"""The in-memory testing modes users run their own tests with (no Redis involved)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
from typing import Any

import pytest

import cogworker
from cogworker import job, server_chain, testing

calls: list[Any] = []


@job(queue="q1")
def add(a: int, b: int) -> None:
    calls.append(a + b)


@job
def chain(n: int) -> None:
    calls.append(f"chain {n}")
    if n > 0:
        chain.perform_async(n - 1)


@job
def fails() -> None:
    raise KeyError("boom")


tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="unset")


@job
async def async_add(a: int, b: int) -> None:
    await asyncio.sleep(0)  # suspends: only a coroutine really run to its end gets past this
    calls.append(("async", a + b, tenant.get(), threading.current_thread().name))


@job
async def async_fails() -> None:
    await asyncio.sleep(0)
    raise KeyError("async boom")


@job
def forgot_async() -> Any:
    return async_add.func(1, 1)  # a coroutine, never awaited


class Later:
    """An awaitable that isn't a coroutine."""

    def __await__(self) -> Any:
        calls.append("awaited")
        yield


@job
def returns_awaitable() -> Any:
    return Later()


def with_tenant(job_: dict[str, Any], call_next: Any) -> None:
    token = tenant.set("acme")
    try:
        call_next()
    finally:
        tenant.reset(token)


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


def test_fake_records_and_runs_on_demand() -> None:
    with testing.fake():
        jid = add.perform_async(1, 2)
        add.perform_in(30, 3, 4)
        cogworker.push_bulk(add, [(5, 6)])
        assert [j["args"] for j in add.jobs] == [[1, 2], [3, 4], [5, 6]]
        assert add.jobs[0]["jid"] == jid and add.jobs[0]["queue"] == "q1"
        assert calls == []
        add.perform_one()
        assert calls == [3] and len(add.jobs) == 2
        add.drain()
        assert calls == [3, 7, 11] and add.jobs == []
        with pytest.raises(testing.EmptyQueueError):
            add.perform_one()


def test_drain_all_runs_what_jobs_push() -> None:
    with testing.fake():
        chain.perform_async(2)
        add.perform_async(1, 1)
        testing.drain_all()
        assert calls == ["chain 2", "chain 1", "chain 0", 2]
        assert testing.all_jobs() == {}


def test_clear_and_validation_still_apply() -> None:
    with testing.fake():
        add.perform_async(1, 2)
        add.clear()
        assert add.jobs == []
        with pytest.raises(TypeError, match="args"):
            add.perform_async(object(), 1)


def test_inline_runs_through_the_server_chain() -> None:
    seen: list[str] = []

    def mw(job_: dict[str, Any], call_next: Any) -> None:
        seen.append(job_["class"])
        call_next()

    server_chain.add(mw)
    with testing.inline():
        add.perform_async(2, 2)
        assert calls == [4]
        assert seen == ["tests.unit.api.test_testing_modes.add"]
        with pytest.raises(KeyError):
            fails.perform_async()


def test_arguments_round_trip_through_json() -> None:
    with testing.fake():
        add.perform_async(1, 2)
        job_ = add.jobs[0]
    assert isinstance(job_["args"], list)


def test_modes_leave_no_state_behind() -> None:
    with testing.fake():
        add.perform_async(1, 2)
    assert testing.mode is None
    assert testing.all_jobs() == {}


def test_fake_drain_runs_an_async_job_to_completion_inside_the_middleware() -> None:
    server_chain.add(with_tenant)
    with testing.fake():
        async_add.perform_async(1, 2)
        cogworker.push_bulk(async_add, [(3, 4)])
        assert calls == []
        async_add.drain()
    main = threading.current_thread().name
    assert calls == [("async", 3, "acme", main), ("async", 7, "acme", main)]


def test_inline_runs_an_async_job_and_raises_its_error() -> None:
    with testing.inline():
        async_add.perform_async(2, 2)
        assert calls == [("async", 4, "unset", threading.current_thread().name)]
        with pytest.raises(KeyError, match="async boom"):
            async_fails.perform_async()


def test_inside_a_running_loop_drain_runs_the_job_on_a_helper_thread() -> None:
    """An async test calling drain(): this thread can't wait for its own loop, so the job runs to
    completion on a helper thread's loop (api/async_jobs.py), with the middleware's context."""
    server_chain.add(with_tenant)

    async def an_async_test() -> None:
        with testing.fake():
            async_add.perform_async(5, 5)
            async_add.drain()
            with pytest.raises(KeyError, match="async boom"), testing.inline():
                async_fails.perform_async()

    asyncio.run(an_async_test())
    assert calls == [("async", 10, "acme", "cogworker-testing-async")]


def test_a_sync_job_returning_a_coroutine_is_a_type_error_without_a_warning(recwarn: Any) -> None:
    with testing.fake():
        forgot_async.perform_async()
        with pytest.raises(TypeError, match="returned a coroutine; declare it `async def`"):
            forgot_async.drain()
    assert calls == []
    gc.collect()  # an unclosed coroutine warns "was never awaited" when it is collected
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_sync_job_returning_any_awaitable_is_a_type_error() -> None:
    with testing.inline(), pytest.raises(TypeError, match=r"returned an awaitable \(Later\); declare it"):
        returns_awaitable.perform_async()
    assert calls == []
