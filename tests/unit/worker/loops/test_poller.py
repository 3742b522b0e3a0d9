"""The scheduled/retry poller: atomic graduation, burying what can't be enqueued, surviving outages."""

from __future__ import annotations

import json
import threading
import time

import demo_jobs
import redis
import structlog

from cogworker.settings import load_settings
from tests.support import components
from tests.support.redis_server import RedisServer, wait_until


def test_due_entries_move_to_their_queues(r: redis.Redis, configured: object, settings) -> None:
    demo_jobs.record.perform_in(100, "later")
    demo_jobs.on_other.perform_in(100, "x")
    for raw in r.zrange("cogworker:schedule", 0, -1):
        r.zadd("cogworker:schedule", {raw: time.time() - 1}, xx=True)
    demo_jobs.record.perform_in(1000, "not-yet")
    r.zadd(
        "cogworker:retry",
        {json.dumps({"class": "demo_jobs.record", "queue": "default", "jid": "r1", "args": ["retry"]}): 0},
    )
    parts = components.build(settings)
    assert parts.poller.enqueue_due() == 3
    assert r.zcard("cogworker:schedule") == 1
    assert r.zcard("cogworker:retry") == 0
    default = [json.loads(x) for x in r.lrange("cogworker:queue:default", 0, -1)]
    assert sorted(p["args"][0] for p in default) == ["later", "retry"]
    assert all("at" not in p and p["enqueued_at"] > 0 for p in default)
    assert r.llen("cogworker:queue:other") == 1
    assert {"default", "other"} <= r.smembers("cogworker:queues")


def test_racing_pollers_enqueue_each_entry_once(r: redis.Redis, settings) -> None:
    entries = {
        json.dumps({"class": "demo_jobs.record", "queue": "default", "jid": str(i), "args": [i]}): 0
        for i in range(300)
    }
    r.zadd("cogworker:schedule", entries)
    pollers = [components.build(settings).poller for _ in range(4)]
    threads = [threading.Thread(target=p.enqueue_due) for p in pollers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jids = [json.loads(x)["jid"] for x in r.lrange("cogworker:queue:default", 0, -1)]
    assert sorted(jids, key=int) == [str(i) for i in range(300)]


def test_entries_that_cant_be_enqueued_are_buried(r: redis.Redis, settings) -> None:
    r.zadd("cogworker:schedule", {"garbage": 1, '{"class":"x"}': 2, '{"class":"y","queue":""}': 3})
    good = json.dumps({"class": "demo_jobs.record", "queue": "default", "jid": "g", "args": ["g"]})
    r.zadd("cogworker:schedule", {good: 4})
    parts = components.build(settings)
    assert parts.poller.enqueue_due() == 1
    assert r.zcard("cogworker:schedule") == 0
    dead = [json.loads(x) for x in r.zrange("cogworker:dead", 0, -1)]
    assert sorted(d["raw"] for d in dead) == sorted(["garbage", '{"class":"x"}', '{"class":"y","queue":""}'])
    assert r.get("cogworker:stat:failed") == "3"


def test_a_failed_poll_is_reported_once_and_retried(private_redis: RedisServer) -> None:
    settings = load_settings(redis_url=private_redis.url, poll_interval_s=0.05)
    parts = components.build(settings)
    client = private_redis.client()
    with structlog.testing.capture_logs() as logs:
        private_redis.stop()
        for _ in range(5):
            parts.poller.poll_once()
        private_redis.start()
        client = private_redis.client()
        client.zadd("cogworker:schedule", {json.dumps({"class": "a", "queue": "default", "jid": "1"}): 0})

        def all_ended() -> bool:
            parts.poller.poll_once()
            started = {e["component"] for e in logs if e["event"] == "redis_outage_started"}
            ended = {e["component"] for e in logs if e["event"] == "redis_outage_ended"}
            return started == ended

        wait_until(all_ended, timeout=5, message="every outage to end")
    assert client.llen("cogworker:queue:default") == 1
    started = [e for e in logs if e["event"] == "redis_outage_started"]
    ended = [e for e in logs if e["event"] == "redis_outage_ended"]
    components_down = sorted(e["component"] for e in started)
    assert components_down == sorted(e["component"] for e in ended)
    assert len(components_down) == len(set(components_down))  # one line per component and outage
    assert "Scheduler" in components_down


def test_an_entry_due_before_the_next_poll_is_enqueued_on_time(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    # Issue 38: the poll interval (5 s by default) was a due entry's lateness. Here it is 60 s, and the
    # first poll has passed when the entry falls due: only the early pass can enqueue it in time.
    settings = load_settings(redis_url=redis_server.url, poll_interval_s=60.0)
    parts = components.build(settings)
    due_at = time.time() + 0.5
    entry = json.dumps({"class": "demo_jobs.record", "queue": "default", "jid": "soon", "args": []})
    r.zadd("cogworker:schedule", {entry: due_at})
    r.zadd("cogworker:retry", {entry.replace("soon", "later"): time.time() + 3_600})
    parts.poller.start()
    try:
        wait_until(lambda: r.llen("cogworker:queue:default") == 1, timeout=5, message="the due entry")
        enqueued_at = json.loads(r.lindex("cogworker:queue:default", 0))["enqueued_at"]
    finally:
        parts.poller.stop()
    assert due_at <= enqueued_at < due_at + 1.0
    assert r.zcard("cogworker:retry") == 1  # not due: left where it is


def entry(jid: str, queue: str = "default") -> str:
    return json.dumps({"class": "demo_jobs.record", "queue": queue, "jid": jid, "args": []})


def test_a_batch_of_due_entries_costs_about_two_commands_each(r: redis.Redis, settings) -> None:
    # Issue 38: a script per entry, each with its type checks, SADD and PUBLISH, cost 9 commands a
    # due job; one call per batch checks and announces each queue once.
    r.zadd("cogworker:schedule", {entry(str(i), ("a", "b")[i % 2]): i for i in range(200)})
    parts = components.build(settings)
    r.config_resetstat()
    assert parts.poller.enqueue_due() == 200
    stats = r.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}
    assert calls["zscore"] == 200 and calls["zrem"] == 2 and calls["lpush"] == 4  # two batches, two queues
    assert sum(calls.values()) <= 2 * 200 + 30, calls
    # Pushed in due order: the oldest is popped first.
    assert [json.loads(x)["jid"] for x in reversed(r.lrange("cogworker:queue:a", 0, -1))][:3] == [
        "0",
        "2",
        "4",
    ]


def test_entries_for_a_queue_of_the_wrong_type_stay_and_the_others_move(r: redis.Redis, settings) -> None:
    r.set("cogworker:queue:broken", "not a list")
    r.zadd("cogworker:schedule", {entry("1"): 1, entry("2", "broken"): 2, entry("3"): 3})
    parts = components.build(settings)
    due = r.zrange("cogworker:schedule", 0, -1)
    moved, wrong = parts.poller.due_entries.graduate("cogworker:schedule", due)
    assert (moved, wrong) == (2, ["cogworker:queue:broken"])
    assert r.zrange("cogworker:schedule", 0, -1) == [entry("2", "broken")]
    assert sorted(json.loads(x)["jid"] for x in r.lrange("cogworker:queue:default", 0, -1)) == ["1", "3"]


def test_an_entry_pushed_between_polls_due_soon_waits_a_second_at_most(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    settings = load_settings(redis_url=redis_server.url, poll_interval_s=60.0)
    parts = components.build(settings)
    r.config_resetstat()
    parts.poller.start()
    try:
        # The poller has polled and looked at the (empty) sets: its next poll is 30-90 s away.
        wait_until(
            lambda: int(r.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0)) >= 2,
            timeout=5,
            message="the poller's first look at the sets",
        )
        due_at = time.time() + 0.2
        r.zadd("cogworker:schedule", {entry("soon"): due_at})
        wait_until(lambda: r.llen("cogworker:queue:default") == 1, timeout=5, message="the due entry")
        enqueued_at = json.loads(r.lindex("cogworker:queue:default", 0))["enqueued_at"]
    finally:
        parts.poller.stop()
    assert due_at <= enqueued_at < due_at + 1.5
