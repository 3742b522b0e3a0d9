"""A periodic entry's run history and its pause, against a real Redis: the ticker records each slot
it decides (enqueued with its jid, skipped, missed, paused) with the claim, capped; a paused entry's
slots are recorded as paused and enqueue nothing; a resume runs the next slot with no catch-up."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import periodic_targets
import redis
import status_jobs
from structlog.testing import capture_logs

from cogworker.api.periodic import RUNS_KEPT, Entry
from cogworker.ops import periodic as periodic_ops
from cogworker.ops import periodic_runs
from cogworker.settings import Settings
from cogworker.worker.loops.ticker import Ticker
from tests.support.components import build
from tests.support.inproc import Runner


def at(*parts: int) -> float:
    return dt.datetime(*parts, tzinfo=dt.UTC).timestamp()


def ticker(settings: Settings, *entries_: Entry) -> Ticker:
    return Ticker(build(settings).ctx, entries=entries_)


def runs(r: redis.Redis, name: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(f"cogworker:periodic:runs:{name}", 0, -1)]


def queued(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange("cogworker:queue:default", 0, -1))]


def test_each_slot_decided_is_recorded_once_newest_first_and_capped(
    r: redis.Redis, configured: Settings
) -> None:
    minutely = Entry("minutely", periodic_targets.rollup, "* * * * *", until_executed=True)
    tickers = [ticker(configured, minutely) for _ in range(3)]
    for t in tickers:
        t.tick(now=at(2024, 5, 1, 12, 0, 30))
    assert runs(r, "minutely") == []  # the baseline is no run
    for t in tickers:
        t.tick(now=at(2024, 5, 1, 12, 1, 1))
    [first] = queued(r)
    [enqueued] = runs(r, "minutely")  # three tickers, one record
    assert enqueued == {
        "slot": at(2024, 5, 1, 12, 1),
        "outcome": "enqueued",
        "jid": first["jid"],
        "at": at(2024, 5, 1, 12, 1, 1),
        "previous": at(2024, 5, 1, 12, 0),
    }
    tickers[0].tick(now=at(2024, 5, 1, 12, 2, 1))  # the 12:01 run is still queued
    skipped = runs(r, "minutely")[0]
    assert (skipped["outcome"], skipped["holder"]) == ("running", first["jid"]) and "jid" not in skipped

    assert Runner(configured).run_next()
    for minute in range(3, 3 + RUNS_KEPT + 2):
        tickers[0].tick(now=at(2024, 5, 1, 12, minute, 1))
        Runner(configured).run_next()
    kept = runs(r, "minutely")
    assert len(kept) == RUNS_KEPT
    assert [run["slot"] for run in kept] == [at(2024, 5, 1, 12, m) for m in range(RUNS_KEPT + 4, 4, -1)]


def test_missed_and_stopped_slots_are_recorded(r: redis.Redis, configured: Settings) -> None:
    daily = Entry("daily", periodic_targets.rollup, "0 3 * * *")
    unique = Entry("unique", periodic_targets.unique_rollup, "0 * * * *")
    ticker(configured, daily, unique).tick(now=at(2024, 5, 1, 4, 0))
    t = ticker(configured, daily, unique)
    t.tick(now=at(2024, 5, 1, 5, 0, 1))
    t.tick(now=at(2024, 5, 1, 6, 0, 1))  # the 05:00 copy hasn't run: the unique claim stops this one
    assert [run["outcome"] for run in runs(r, "unique")] == ["stopped", "enqueued"]
    t.tick(now=at(2024, 5, 4, 6, 0))  # three hours late for the 4th's 03:00: past the grace
    [missed] = runs(r, "daily")
    assert missed["outcome"] == "missed" and missed["previous"] == at(2024, 5, 1, 3)


def test_a_paused_entry_records_its_slots_as_paused_and_enqueues_nothing(
    r: redis.Redis, configured: Settings
) -> None:
    hourly = Entry("hourly", periodic_targets.rollup, "0 * * * *")
    t = ticker(configured, hourly)
    t.tick(now=at(2024, 5, 1, 10, 30))
    assert periodic_ops.pause(r, "hourly") is True
    assert periodic_ops.pause(r, "hourly") is False  # already paused: one member, no error
    with capture_logs() as logs:
        for hour in (11, 12, 13):
            t.tick(now=at(2024, 5, 1, hour, 0, 1))
    assert queued(r) == []
    assert [run["outcome"] for run in runs(r, "hourly")] == ["paused"] * 3
    assert r.get(f"cogworker:periodic:slot:hourly:{int(at(2024, 5, 1, 13))}") == "paused"
    assert [e["event"] for e in logs if e.get("entry") == "hourly"] == ["periodic_slot_paused"] * 3

    # Paused while every worker was away too: the late slot is paused, not missed.
    ticker(configured, hourly).tick(now=at(2024, 5, 1, 18, 10))
    assert runs(r, "hourly")[0]["outcome"] == "paused" and queued(r) == []

    assert periodic_ops.resume(r, "hourly") is True
    assert periodic_ops.resume(r, "hourly") is False
    t.tick(now=at(2024, 5, 1, 18, 30))  # resumed mid-hour: 18:00 stays paused, nothing caught up
    assert queued(r) == []
    t.tick(now=at(2024, 5, 1, 19, 0, 1))
    [payload] = queued(r)
    assert payload["periodic_slot"] == at(2024, 5, 1, 19)
    newest = runs(r, "hourly")[0]
    assert (newest["outcome"], newest["jid"]) == ("enqueued", payload["jid"])


def test_a_pause_landing_after_the_ticker_looked_still_stops_the_push(
    r: redis.Redis, configured: Settings
) -> None:
    """The script reads the paused set with the claim: a pause between the ticker's own look and
    the script enqueues nothing, and the unique claim the chain took is given back."""
    unique = Entry("unique", periodic_targets.unique_rollup, "0 * * * *")
    t = ticker(configured, unique)
    t.tick(now=at(2024, 5, 1, 10, 30))
    real_run = t._run

    def pause_then_run(entry: Entry, mode: str, slot: int, now: float, job: Any = None) -> Any:
        if mode == "enqueue":
            periodic_ops.pause(r, "unique")
        return real_run(entry, mode, slot, now, job)

    t._run = pause_then_run  # type: ignore[method-assign]
    t.tick(now=at(2024, 5, 1, 11, 0, 1))
    assert queued(r) == []
    assert runs(r, "unique")[0]["outcome"] == "paused"
    assert r.keys("cogworker:unique:*") == []


def test_the_listing_reads_gaps_as_missed_and_shows_how_enqueued_runs_ended(
    r: redis.Redis, configured: Settings
) -> None:
    hourly = Entry("hourly", status_jobs.tracked_flaky, "0 * * * *", args=("h",))
    t = ticker(configured, hourly)
    t.tick(now=at(2024, 5, 1, 10, 30))
    t.tick(now=at(2024, 5, 1, 11, 0, 1))
    [payload] = queued(r)
    assert Runner(configured).run_next()  # it fails: retried later
    # Every worker away from 11:30 to 15:10: 12:00 and 13:00 are gone, 14:00 is caught up, late.
    ticker(configured, hourly).tick(now=at(2024, 5, 1, 14, 10))
    [listed] = periodic_ops.entries(r, now=at(2024, 5, 1, 14, 20))  # the listing shows the newest only
    assert [(run.outcome, run.count) for run in listed.runs] == [("enqueued", 1), ("enqueued", 1)]
    entry = periodic_ops.get(r, "hourly", now=at(2024, 5, 1, 14, 20))
    assert [(run.outcome, run.count) for run in entry.runs] == [
        ("enqueued", 1),
        ("missed", 2),
        ("enqueued", 1),
    ]
    assert entry.runs[1].slot == at(2024, 5, 1, 13) and "no process" in entry.runs[1].detail
    assert entry.runs[2].jid == payload["jid"] and entry.runs[2].state == "in retry"
    assert entry.last_run is not None and entry.last_run.slot == at(2024, 5, 1, 14)

    # Nobody handles 15:00 and 16:00: each reads as missed once it is `settle_s` late.
    [entry] = periodic_ops.entries(r, now=at(2024, 5, 1, 16, 0, 5), settle_s=11)
    assert entry.last_run is not None  # 16:00 may still come
    assert (entry.last_run.outcome, entry.last_run.slot, entry.last_run.count) == (
        "missed",
        at(2024, 5, 1, 15),
        1,
    )
    [entry] = periodic_ops.entries(r, now=at(2024, 5, 1, 16, 0, 12), settle_s=11)
    assert entry.last_run is not None
    assert (entry.last_run.outcome, entry.last_run.slot, entry.last_run.count) == (
        "missed",
        at(2024, 5, 1, 16),
        2,
    )
    assert [run.outcome for run in entry.runs[1:]] == ["enqueued", "enqueued"]
    gaps = periodic_ops.get(r, "hourly", now=at(2024, 5, 1, 16, 0, 12), settle_s=11)
    assert [run.outcome for run in gaps.runs] == ["missed", "enqueued", "missed", "enqueued"]
    assert entry.paused is False
    periodic_ops.pause(r, "hourly")
    assert periodic_ops.get(r, "hourly").paused is True


def test_a_long_gap_is_one_missed_row_counted_up_to_a_cap(r: redis.Redis, configured: Settings) -> None:
    every_second = Entry("fast", periodic_targets.rollup, "* * * * * *")
    ticker(configured, every_second).tick(now=at(2024, 5, 1, 10, 0, 0, 500000))
    # No worker for an hour: the page counts what it can of the gap, and dates it at its end.
    [entry] = periodic_ops.entries(r, now=at(2024, 5, 1, 11, 0, 0, 200000), settle_s=2)
    assert entry.last_run is not None
    missed = entry.last_run
    assert (missed.outcome, missed.slot, missed.more) == ("missed", at(2024, 5, 1, 10, 59, 58), True)
    assert missed.count == periodic_runs.GAP_CAP and f"{periodic_runs.GAP_CAP}+ slots" in missed.detail


def test_the_history_reads_slots_by_the_ticker_rules() -> None:
    """periodic_runs.Slots moves one croniter around; it must find the slots Entry finds."""
    for cron, tz in (
        ("0 9 * * *", "America/New_York"),
        ("* * * * * */15", "UTC"),
        ("30 2 * * *", "Europe/Paris"),
    ):
        entry = Entry("probe", periodic_targets.rollup, cron, tz=tz)
        slots = periodic_runs.Slots(entry)
        for moment in (at(2024, 3, 9, 12, 0), at(2024, 3, 10, 12, 0, 44), at(2024, 3, 31, 1, 59, 59)):
            assert slots.latest(moment) == entry.slot_at(moment)
            start = entry.slot_at(moment)
            assert slots.between(start, start + 3 * 86400, 50) == entry.slots_between(
                start, start + 3 * 86400, 50
            )
