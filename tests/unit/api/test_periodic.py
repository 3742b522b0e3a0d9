"""Periodic jobs against a real Redis: slots, one enqueue per slot across tickers and processes,
the missed-slot policy, until_executed and its running lock."""

from __future__ import annotations

import datetime as dt
import json
import threading
from typing import Any

import periodic_targets
import pytest
import redis
import status_jobs
from structlog.testing import capture_logs

import cogworker
from cogworker import job
from cogworker.api.periodic import Entry, entries, periodic, unregister
from cogworker.settings import Settings
from cogworker.worker.loops.ticker import Ticker
from tests.support.components import build
from tests.support.inproc import Runner
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


def at(*parts: int, tz: str = "UTC") -> float:
    from zoneinfo import ZoneInfo

    return dt.datetime(*parts, tzinfo=ZoneInfo(tz)).timestamp()


def hourly(**options: Any) -> Entry:
    return Entry("hourly", periodic_targets.rollup, "0 * * * *", **options)


def ticker(settings: Settings, *entries_: Entry, **options: Any) -> Ticker:
    parts = build(settings)
    return Ticker(parts.ctx, entries=entries_, **options)


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(f"cogworker:queue:{queue}", 0, -1))]


def registration(r: redis.Redis, name: str) -> dict[str, Any]:
    return dict(json.loads(r.hget("cogworker:periodic:entries", name) or "{}"))


def test_slots_follow_the_cron_in_its_time_zone() -> None:
    nine_am = Entry("ny", periodic_targets.rollup, "0 9 * * *", tz="America/New_York")
    saturday_noon = at(2024, 3, 9, 12, 0, tz="America/New_York")
    slot = nine_am.slot_at(saturday_noon)
    assert slot == at(2024, 3, 9, 9, 0, tz="America/New_York") == at(2024, 3, 9, 14, 0)
    # Clocks go forward overnight: the next 9 a.m. is 23 hours later, still 9 a.m. in New York.
    assert nine_am.next_after(slot) == at(2024, 3, 10, 13, 0) == slot + 23 * 3600
    # A slot is its own most recent slot; six fields put seconds last.
    assert nine_am.slot_at(slot) == slot
    every_15s = Entry("quarter", periodic_targets.rollup, "* * * * * */15")
    assert every_15s.slot_at(at(2024, 1, 1, 10, 0, 44) + 0.9) == at(2024, 1, 1, 10, 0, 30)
    assert every_15s.slots_between(int(at(2024, 1, 1, 10, 0)), int(at(2024, 1, 1, 10, 1))) == [
        int(at(2024, 1, 1, 10, 0, s)) for s in (15, 30, 45)
    ]


def test_the_decorator_checks_its_arguments_and_registers_the_entry() -> None:
    @job(name="tests.periodic_probe", queue="maintenance")
    def probe() -> None: ...

    with pytest.raises(ValueError, match="cron expression"):
        periodic("every hour")
    with pytest.raises(ValueError, match="time zone"):
        periodic("0 * * * *", tz="Mars/Olympus")
    with pytest.raises(TypeError, match="JSON-native"):
        periodic("0 * * * *", args=[object()])
    with pytest.raises(TypeError, match="above @job"):
        periodic("0 * * * *")(lambda: None)
    try:
        assert periodic("0 * * * *", tz="Europe/Paris")(probe) is probe
        entry = next(e for e in entries() if e.name == "tests.periodic_probe")
        assert (entry.cron, entry.tz, entry.until_executed) == ("0 * * * *", "Europe/Paris", False)
        assert entry.registration()["queue"] == "maintenance"
        periodic("0 * * * *", tz="Europe/Paris")(probe)  # the same entry again: a module imported twice
        with pytest.raises(ValueError, match="already registered"):
            periodic("30 * * * *")(probe)
        assert cogworker.periodic is periodic
    finally:
        unregister("tests.periodic_probe")


def test_a_new_entry_starts_with_the_next_slot(r: redis.Redis, configured: Settings) -> None:
    t = ticker(configured, hourly())
    t.tick(now=at(2024, 5, 1, 14, 20))
    assert queued(r) == []  # deployed at 14:20: 14:00 is from before the entry existed
    reg = registration(r, "hourly")
    assert reg["last_slot"] == at(2024, 5, 1, 14, 0) and reg["cron"] == "0 * * * *"
    assert reg["job"] == "periodic_targets.rollup" and reg["first_seen"] == pytest.approx(
        at(2024, 5, 1, 14, 20)
    )

    t.tick(now=at(2024, 5, 1, 14, 59, 59))
    assert queued(r) == []
    t.tick(now=at(2024, 5, 1, 15, 0, 2))
    [payload] = queued(r)
    slot = int(at(2024, 5, 1, 15, 0))
    assert payload["class"] == "periodic_targets.rollup"
    assert payload["periodic_name"] == "hourly" and payload["periodic_slot"] == slot
    assert "periodic_until_executed" not in payload
    assert r.get(f"cogworker:periodic:slot:hourly:{slot}") == payload["jid"]
    assert 3600 < r.ttl(f"cogworker:periodic:slot:hourly:{slot}") <= 7200
    assert registration(r, "hourly")["last_slot"] == slot
    # A process that starts now finds the slot handled.
    ticker(configured, hourly()).tick(now=at(2024, 5, 1, 15, 0, 3))
    assert len(queued(r)) == 1


def test_tickers_racing_enqueue_each_slot_once(r: redis.Redis, configured: Settings) -> None:
    every_second = Entry("race", periodic_targets.rollup, "* * * * * *")
    tickers = [ticker(configured, every_second) for _ in range(8)]
    start = at(2024, 5, 1, 12, 0, 0)
    for second in range(6):
        barrier = threading.Barrier(len(tickers))

        def tick(t: Ticker, now: float = start + second + 0.25, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            t.tick(now=now)

        threads = [threading.Thread(target=tick, args=(t,)) for t in tickers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    slots = [p["periodic_slot"] for p in queued(r)]
    assert slots == [int(start) + s for s in range(1, 6)]  # second 0 was the baseline


def test_the_most_recent_missed_slot_is_caught_up_once_within_the_grace(
    r: redis.Redis, configured: Settings
) -> None:
    ticker(configured, hourly()).tick(now=at(2024, 5, 1, 10, 20))  # registered; then every worker stops
    back = ticker(configured, hourly())
    with capture_logs() as logs:
        back.tick(now=at(2024, 5, 1, 14, 10))  # back at 14:10: 14:00 is 10 minutes late
        ticker(configured, hourly()).tick(now=at(2024, 5, 1, 14, 11))
    assert [p["periodic_slot"] for p in queued(r)] == [at(2024, 5, 1, 14, 0)]
    [skipped] = [e for e in logs if e["event"] == "periodic_slots_skipped"]
    assert skipped["count"] == 3
    assert skipped["first"] == "2024-05-01T11:00:00+00:00" and skipped["last"] == "2024-05-01T13:00:00+00:00"
    [enqueued] = [e for e in logs if e["event"] == "periodic_enqueued"]
    assert enqueued["late_s"] == 600


def test_a_slot_later_than_the_grace_is_recorded_as_missed_not_run(
    r: redis.Redis, configured: Settings
) -> None:
    daily = Entry("daily", periodic_targets.rollup, "0 3 * * *")
    ticker(configured, daily).tick(now=at(2024, 5, 1, 4, 0))
    back = ticker(configured, daily)
    with capture_logs() as logs:
        back.tick(now=at(2024, 5, 4, 6, 0))  # 3 hours after 03:00 on the 4th: past the 1-hour grace
    assert queued(r) == []
    assert r.get(f"cogworker:periodic:slot:daily:{int(at(2024, 5, 4, 3, 0))}") == "missed"
    [missed] = [e for e in logs if e["event"] == "periodic_slot_missed"]
    assert missed["slot"] == "2024-05-04T03:00:00+00:00" and missed["late_s"] == 3 * 3600
    [skipped] = [e for e in logs if e["event"] == "periodic_slots_skipped"]
    assert skipped["count"] == 2  # the 2nd and the 3rd
    back.tick(now=at(2024, 5, 5, 3, 0, 1))
    assert [p["periodic_slot"] for p in queued(r)] == [at(2024, 5, 5, 3, 0)]


def test_until_executed_skips_slots_while_the_previous_run_is_pending(
    r: redis.Redis, configured: Settings
) -> None:
    minutely = Entry("minutely", periodic_targets.rollup, "* * * * *", until_executed=True)
    t = ticker(configured, minutely)
    t.tick(now=at(2024, 5, 1, 12, 0, 30))
    t.tick(now=at(2024, 5, 1, 12, 1, 1))
    [first] = queued(r)
    assert first["periodic_until_executed"] is True
    assert r.get("cogworker:periodic:running:minutely") == first["jid"]
    assert 0 < r.ttl("cogworker:periodic:running:minutely") <= 24 * 3600

    with capture_logs() as logs:
        t.tick(now=at(2024, 5, 1, 12, 2, 1))  # the 12:01 run hasn't run yet
    assert len(queued(r)) == 1
    skipped_slot = int(at(2024, 5, 1, 12, 2))
    assert (
        r.get(f"cogworker:periodic:slot:minutely:{skipped_slot}") == f"skipped, still running: {first['jid']}"
    )
    assert [e["running_jid"] for e in logs if e["event"] == "periodic_slot_skipped"] == [first["jid"]]

    assert Runner(configured).run_next()  # it runs and succeeds: the lock is free again
    assert r.get("cogworker:periodic:running:minutely") is None
    t.tick(now=at(2024, 5, 1, 12, 3, 1))
    [third] = queued(r)
    assert third["periodic_slot"] == at(2024, 5, 1, 12, 3)
    assert r.get("cogworker:periodic:running:minutely") == third["jid"]


def test_the_running_lock_is_kept_through_a_retry_and_freed_when_the_run_dies(
    r: redis.Redis, configured: Settings
) -> None:
    entry = Entry("fails", periodic_targets.failing_rollup, "* * * * *", until_executed=True)
    t = ticker(configured, entry)
    t.tick(now=at(2024, 5, 1, 12, 0, 30))
    t.tick(now=at(2024, 5, 1, 12, 1, 1))
    [payload] = queued(r)
    runner = Runner(configured)
    assert runner.run_next()  # retry=1: to the retry set
    assert r.get("cogworker:periodic:running:fails") == payload["jid"]
    assert runner.make_retries_due() == 1
    assert runner.run_next()  # to dead
    assert r.zcard("cogworker:dead") == 1
    assert r.get("cogworker:periodic:running:fails") is None


def test_recovery_retakes_the_running_lock_and_a_poison_pill_frees_it(
    r: redis.Redis, configured: Settings
) -> None:
    entry = Entry("orphaned", periodic_targets.rollup, "* * * * *", until_executed=True)
    t = ticker(configured, entry)
    t.tick(now=at(2024, 5, 1, 12, 0, 30))
    t.tick(now=at(2024, 5, 1, 12, 1, 1))
    [payload] = queued(r)
    jid = payload["jid"]
    runner = Runner(configured)
    recovery = runner.parts.recovery

    # Its process died mid-run and the lock expired meanwhile: requeued, the run holds it again.
    r.lmove("cogworker:queue:default", "cogworker:inprogress:gone:1:1", "RIGHT", "LEFT")
    r.delete("cogworker:periodic:running:orphaned")
    assert recovery.requeue("gone:1:1", if_dead_for=None, count_orphans=True).moved == 1
    assert r.get("cogworker:periodic:running:orphaned") == jid

    # It keeps killing its process: filed in dead outside the chain, and the lock is freed.
    r.lmove("cogworker:queue:default", "cogworker:inprogress:gone:1:2", "RIGHT", "LEFT")
    r.set(f"cogworker:orphanings:{jid}", configured.max_orphanings)
    assert len(recovery.requeue("gone:1:2", if_dead_for=None, count_orphans=True).buried) == 1
    assert r.get("cogworker:periodic:running:orphaned") is None


def test_arguments_queue_and_the_client_chain_apply(r: redis.Redis, configured: Settings) -> None:
    with_args = Entry(
        "with-args", periodic_targets.rollup, "0 * * * *", args=(1, "x"), kwargs={"k": True}, queue="reports"
    )
    tracked = Entry("tracked", status_jobs.tracked, "0 * * * *", args=("p",))
    t = ticker(configured, with_args, tracked)
    t.tick(now=at(2024, 5, 1, 10, 30))
    t.tick(now=at(2024, 5, 1, 11, 0, 1))
    [payload] = queued(r, "reports")
    assert payload["args"] == [1, "x"] and payload["kwargs"] == {"k": True}
    assert registration(r, "with-args")["queue"] == "reports"
    [tracked_payload] = queued(r)
    assert cogworker.status(tracked_payload["jid"]) == "queued"  # status middleware ran on the push


def test_a_broken_entry_does_not_stop_the_others(r: redis.Redis, configured: Settings) -> None:
    broken = Entry("broken", periodic_targets.rollup, "0 * * * *", queue="wrong")
    fine = hourly()
    t = ticker(configured, broken, fine)
    t.tick(now=at(2024, 5, 1, 10, 30))
    r.set("cogworker:queue:wrong", "not a list")
    with capture_logs() as logs:
        t.tick(now=at(2024, 5, 1, 11, 0, 1))
    assert [p["periodic_name"] for p in queued(r)] == ["hourly"]
    [failed] = [e for e in logs if e["event"] == "periodic_check_failed"]
    assert failed["entry"] == "broken" and "cogworker:queue:wrong" in failed["error"]
    assert r.get(f"cogworker:periodic:slot:broken:{int(at(2024, 5, 1, 11))}") is None  # nothing half-done
    with capture_logs() as logs:
        t.tick(now=at(2024, 5, 1, 12, 0, 1))  # still broken: not logged again on every poll
    assert [e["event"] for e in logs if e.get("entry") == "broken"] == []
    r.delete("cogworker:queue:wrong")
    with capture_logs() as logs:
        t.tick(now=at(2024, 5, 1, 13, 0, 1))
    assert [e["event"] for e in logs if e.get("entry") == "broken"] == [
        "periodic_enqueued",
        "periodic_slots_skipped",  # 11:00 and 12:00, which failed
        "periodic_check_recovered",
    ]
    assert len(queued(r, "wrong")) == 1


def test_a_push_stopped_by_a_client_middleware_is_recorded_once(r: redis.Redis, configured: Settings) -> None:
    entry = Entry("unique", periodic_targets.unique_rollup, "0 * * * *")
    tickers = [ticker(configured, entry) for _ in range(3)]
    for t in tickers:
        t.tick(now=at(2024, 5, 1, 10, 30))
    tickers[0].tick(now=at(2024, 5, 1, 11, 0, 1))
    assert len(queued(r)) == 1
    with capture_logs() as logs:
        for t in tickers:  # the 11:00 copy hasn't run: the unique claim stops the 12:00 push
            t.tick(now=at(2024, 5, 1, 12, 0, 1))
    assert len(queued(r)) == 1
    assert [e["event"] for e in logs if e["event"] == "periodic_push_stopped"] == ["periodic_push_stopped"]
    assert (
        r.get(f"cogworker:periodic:slot:unique:{int(at(2024, 5, 1, 12))}") == "stopped by a client middleware"
    )


def test_poll_honours_quiet_and_the_check_interval(r: redis.Redis, configured: Settings) -> None:
    quiet = True
    t = ticker(configured, hourly(), quiet=lambda: quiet)
    assert t.poll() == "skipped"
    quiet = False
    assert t.poll() is None  # reads Redis's clock; registers the entry
    assert t.poll() == "skipped"  # within periodic_check_interval_s
    assert registration(r, "hourly")["cron"] == "0 * * * *"
    assert ticker(configured).poll() == "skipped"  # no entries at all


def test_worker_processes_enqueue_each_slot_exactly_once(
    redis_server: RedisServer, r: redis.Redis, workers: WorkerPool
) -> None:
    fast = {
        "COGWORKER_REQUIRE": "periodic_jobs",
        "COGWORKER_POLL_INTERVAL_S": "0.05",
        "COGWORKER_PERIODIC_CHECK_INTERVAL_S": "0.05",
        "COGWORKER_CONCURRENCY": "2",
    }
    started = [workers.start(**fast) for _ in range(3)]
    wait_until(lambda: r.llen("test:slots") >= 6, timeout=30, message="six slots to run")
    for worker in started:
        wait_until(lambda w=worker: w.events_named("worker_ready"), timeout=15, message="ready")
        assert worker.stop() == 0
    ran = [int(line.split()[0]) for line in r.lrange("test:slots", 0, -1)]
    # Whatever was enqueued but not run yet is back on its queue (stopping requeues running jobs).
    waiting = [p["periodic_slot"] for p in queued(r)]
    every_slot = ran + waiting
    assert len(every_slot) == len(set(every_slot)), f"a slot was enqueued twice: {sorted(every_slot)}"
    enqueued = [e for worker in started for e in worker.events_named("periodic_enqueued")]
    assert len(enqueued) == len(every_slot)
    for slot in every_slot:
        jid = r.get(f"cogworker:periodic:slot:periodic_jobs.every_second:{slot}")
        assert jid is not None and len(jid) == 24
