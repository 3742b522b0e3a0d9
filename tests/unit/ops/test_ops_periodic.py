"""ops/periodic.py against a real Redis: entries registered by a real ticker (the path workers take),
their next slot in their own time zone, and "Enqueue now" pushing the entry's job with its
arguments to its queue."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from zoneinfo import ZoneInfo

import periodic_targets
import pytest
import redis

from cogworker.api.periodic import Entry
from cogworker.ops import NotFound, OpsError
from cogworker.ops import periodic as periodic_ops
from cogworker.settings import Settings
from cogworker.worker.loops.ticker import Ticker
from tests.support.components import build


def at(*parts: int, tz: str = "UTC") -> float:
    return dt.datetime(*parts, tzinfo=ZoneInfo(tz)).timestamp()


def register(settings: Settings, now: float, *entries: Entry) -> None:
    """A worker's first look at its entries: the baseline writes each registration."""
    Ticker(build(settings).ctx, entries=entries).tick(now=now)


def queued(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(f"cogworker:queue:{queue}", 0, -1))]


NOON_NY = at(2024, 3, 9, 12, 0, tz="America/New_York")


def entries_for_tests() -> tuple[Entry, Entry]:
    report = Entry(
        "morning-report",
        periodic_targets.rollup,
        "0 9 * * *",
        tz="America/New_York",
        until_executed=True,
        args=(7, "é", 2**60),
        kwargs={"when": [], "deep": {"x": None}},
        queue="maintenance",
    )
    hourly = Entry("hourly", periodic_targets.rollup, "0 * * * *")
    return report, hourly


def test_entries_list_what_the_ticker_registered_with_the_next_slot_in_the_entry_time_zone(
    r: redis.Redis, configured: Settings
) -> None:
    report, hourly = entries_for_tests()
    register(configured, NOON_NY, report, hourly)
    r.set("cogworker:periodic:running:morning-report", "abc123")
    found = periodic_ops.entries(r, NOON_NY)
    assert [e.name for e in found] == ["hourly", "morning-report"]
    listed_hourly, listed_report = found
    assert (listed_report.job, listed_report.cron, listed_report.tz) == (
        "periodic_targets.rollup",
        "0 9 * * *",
        "America/New_York",
    )
    assert listed_report.queue == "maintenance" and listed_report.until_executed is True
    # Arguments survive the registration's trip through the script's cjson unchanged: the empty
    # list stays a list and the integer past 2**53 keeps every digit.
    assert listed_report.args == [7, "é", 2**60]
    assert listed_report.kwargs == {"when": [], "deep": {"x": None}}
    # Saturday noon in New York; clocks go forward that night, so the next 9 a.m. is 13:00 UTC.
    assert listed_report.next_slot == at(2024, 3, 10, 9, 0, tz="America/New_York") == at(2024, 3, 10, 13, 0)
    assert listed_report.last_slot == at(2024, 3, 9, 9, 0, tz="America/New_York")
    assert listed_report.first_seen == pytest.approx(NOON_NY)
    assert listed_report.running_jid == "abc123" and listed_hourly.running_jid is None
    assert listed_hourly.next_slot == at(2024, 3, 9, 18, 0) and listed_hourly.queue == "default"
    assert listed_hourly.args == [] and listed_hourly.kwargs == {} and listed_hourly.problem is None


def test_entries_default_to_redis_clock_and_a_registration_redis_holds_damaged_is_a_problem_not_an_error(
    r: redis.Redis,
) -> None:
    r.hset(
        "cogworker:periodic:entries",
        mapping={
            "bad-tz": json.dumps({"job": "a.b", "cron": "0 * * * *", "tz": "Mars/Olympus", "queue": "q"}),
            "bad-cron": json.dumps({"job": "a.b", "cron": "every hour", "tz": "UTC", "queue": "q"}),
            "not-json": "{",
        },
    )
    found = {e.name: e for e in periodic_ops.entries(r)}
    assert found["bad-tz"].next_slot is None and "Mars/Olympus" in (found["bad-tz"].problem or "")
    assert found["bad-cron"].next_slot is None and "every hour" in (found["bad-cron"].problem or "")
    assert found["not-json"].problem == "the registration is not a JSON object"
    assert found["bad-tz"].args is None  # no "arguments" field: written by an older worker


def test_enqueue_now_pushes_the_entry_job_with_its_arguments_to_its_queue(
    r: redis.Redis, configured: Settings
) -> None:
    report, _ = entries_for_tests()
    register(configured, NOON_NY, report)
    result = periodic_ops.enqueue_now(r, configured, "morning-report")
    assert result.resolved and result.queue == "maintenance" and result.job == "periodic_targets.rollup"
    [payload] = queued(r, "maintenance")
    assert payload["jid"] == result.jid and payload["class"] == "periodic_targets.rollup"
    assert payload["args"] == [7, "é", 2**60] and payload["kwargs"] == {"when": [], "deep": {"x": None}}
    assert "periodic_slot" not in payload  # outside the schedule: no slot claimed
    assert r.get("cogworker:periodic:running:morning-report") is None
    assert queued(r, "default") == []


def test_enqueue_now_pushes_by_name_with_a_warning_when_the_job_is_not_importable(
    r: redis.Redis, settings: Settings
) -> None:
    registration = {
        "job": "no_such_module_here.nightly",
        "cron": "0 3 * * *",
        "tz": "UTC",
        "queue": "nightly",
        "until_executed": False,
        "arguments": json.dumps({"args": ["x"], "kwargs": {"n": 1}}),
    }
    r.hset("cogworker:periodic:entries", "nightly", json.dumps(registration))
    result = periodic_ops.enqueue_now(r, settings, "nightly")
    assert not result.resolved and result.queue == "nightly"
    assert any("pushed by name" in w for w in result.warnings)
    [payload] = queued(r, "nightly")
    assert (payload["class"], payload["args"], payload["kwargs"]) == (
        "no_such_module_here.nightly",
        ["x"],
        {"n": 1},
    )


def test_enqueue_now_refuses_an_unknown_entry_and_one_registered_without_arguments(
    r: redis.Redis, settings: Settings
) -> None:
    with pytest.raises(NotFound, match="no periodic entry 'nope'"):
        periodic_ops.enqueue_now(r, settings, "nope")
    old = {"job": "periodic_targets.rollup", "cron": "0 * * * *", "tz": "UTC", "queue": "default"}
    r.hset("cogworker:periodic:entries", "old", json.dumps(old))
    with pytest.raises(OpsError, match="older worker"):
        periodic_ops.enqueue_now(r, settings, "old")
    assert r.exists("cogworker:queue:default") == 0
