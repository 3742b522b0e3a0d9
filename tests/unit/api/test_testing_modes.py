"""The in-memory testing modes users run their own tests with (no Redis involved)."""

from __future__ import annotations

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
