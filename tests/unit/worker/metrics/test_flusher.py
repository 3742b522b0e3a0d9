"""worker/metrics: the recorder's counts as the minute hashes of store/metrics_layout.py, written
by the flusher's script on a real Redis (a fixed clock, so every key's minute is known)."""

from __future__ import annotations

import json
import time

import pytest
import redis
import structlog

from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.store import metrics_layout as layout
from cogworker.store.redis_context import RedisContext
from cogworker.worker.metrics.flusher import Flusher
from cogworker.worker.metrics.recorder import Recorder, expiry_of
from cogworker.worker.settling.job_stats import JobCounts
from tests.support.redis_server import RedisServer

NOW = 1_800_000_030.0  # 30 s into its minute
MINUTE = layout.minute_of(NOW)


def flusher_for(settings: Settings, recorder: Recorder, *, queues: tuple[str, ...] = ("default",)) -> Flusher:
    return Flusher(
        RedisContext.build(settings), "host:1:abc", recorder, queues=queues, interval_s=60, clock=lambda: NOW
    )


def test_runs_and_pickups_become_the_minute_hashes(settings: Settings, r: redis.Redis) -> None:
    recorder = Recorder()
    for ms in (0.5, 3.0, 3.0, 900.0):
        recorder.ended("app.mail", ms / 1000, False, NOW)
    recorder.ended("app.mail", 0.002, True, NOW)
    recorder.ended("app.pay", 0.2, True, NOW + 60)  # the next minute
    recorder.picked("default", NOW - 1.5, NOW)
    recorder.picked("default", NOW - 0.5, NOW)
    recorder.picked("default", "not a time", NOW)
    assert flusher_for(settings, recorder).flush()

    jobs = r.hgetall(layout.jobs_key(MINUTE))
    bucket = {ms: f"app.mail|h{layout.bucket_of(ms)}" for ms in (0.5, 2.0, 3.0, 900.0)}
    assert jobs == {
        "app.mail|p": "5",
        "app.mail|f": "1",
        "app.mail|ms": str(round(0.5 + 3 + 3 + 900 + 2)),
        bucket[0.5]: "1",
        bucket[2.0]: "1",
        bucket[3.0]: "2",
        bucket[900.0]: "1",
    }
    assert r.hgetall(layout.jobs_key(MINUTE + 1)) == {
        "app.pay|p": "1",
        "app.pay|f": "1",
        "app.pay|ms": "200",
        f"app.pay|h{layout.bucket_of(200)}": "1",
    }
    assert r.hgetall(layout.queues_key(MINUTE)) == {"default|n": "3", "default|wait_ms": "2000"}
    # Expire RETENTION_S after their minute ends, measured from the flush's clock.
    ttl = r.ttl(layout.jobs_key(MINUTE))
    assert ttl == expiry_of(MINUTE) - int(NOW) == layout.RETENTION_S + 30
    assert r.ttl(layout.jobs_key(MINUTE + 1)) == layout.RETENTION_S + 90


def test_a_flush_sent_twice_is_counted_once(settings: Settings, r: redis.Redis) -> None:
    recorder = Recorder()
    recorder.ended("app.mail", 0.01, False, NOW)
    flusher = flusher_for(settings, recorder)
    batch = recorder.take()
    assert flusher._send(1, batch) == [1]
    assert flusher._send(1, batch) == [0]  # the resend after a lost reply
    assert r.hget(layout.jobs_key(MINUTE), "app.mail|p") == "1"
    assert r.get(keys.metrics_flushed("host:1:abc")) == "1"
    assert 0 < r.ttl(keys.metrics_flushed("host:1:abc")) <= layout.RETENTION_S


def test_latency_of_the_oldest_waiting_job_keeps_the_minutes_largest(
    settings: Settings, r: redis.Redis
) -> None:
    r.lpush(keys.queue("default"), json.dumps({"jid": "a", "class": "x", "enqueued_at": NOW - 7.25}))
    r.lpush(keys.queue("default"), json.dumps({"jid": "b", "class": "x", "enqueued_at": NOW - 1}))
    r.lpush(keys.queue("old"), json.dumps({"jid": "c", "class": "x", "created_at": NOW - 2}))
    r.lpush(keys.queue("odd"), "not json")
    flusher = flusher_for(settings, Recorder(), queues=("default", "old", "odd", "empty"))
    assert flusher.flush()
    assert r.hgetall(layout.queues_key(MINUTE)) == {"default|lat_ms": "7250", "old|lat_ms": "2000"}
    assert r.ttl(layout.queues_key(MINUTE)) == layout.RETENTION_S + 30
    r.rpop(keys.queue("default"))  # the oldest ran: a lower sample later in the minute
    assert flusher.flush()
    assert r.hget(layout.queues_key(MINUTE), "default|lat_ms") == "7250"


def test_nothing_to_write_writes_nothing(settings: Settings, r: redis.Redis) -> None:
    flusher = flusher_for(settings, Recorder(), queues=("empty",))
    assert flusher.flush() and flusher.flush()
    assert r.keys("*") == []


def test_redis_refusing_the_script_is_logged_once_and_kept(settings: Settings, r: redis.Redis) -> None:
    r.acl_setuser("nometrics", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-hincrby"])
    try:
        url = settings.redis_url.replace("redis://", "redis://nometrics:pw@")
        refused = settings.model_copy(update={"redis_url": url})
        recorder = Recorder()
        flusher = Flusher(
            RedisContext.build(refused), "host:3:x", recorder, queues=(), interval_s=60, clock=lambda: NOW
        )
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                recorder.ended("app.mail", 0.001, False, NOW)
                assert not flusher.flush()
        [line] = [e for e in logs if e["event"] == "metrics_flush_failed"]
        assert "can't run this command" in line["error"]
        assert flusher.pending == 3 and not r.exists(layout.jobs_key(MINUTE))
        r.acl_setuser("nometrics", commands=["+hincrby"])  # the ACL fixed: every kept flush goes, in order
        assert flusher.flush()
        assert r.hget(layout.jobs_key(MINUTE), "app.mail|p") == "3"
    finally:
        r.acl_deluser("nometrics")


def test_a_wrong_type_minute_hash_is_skipped_the_rest_written(settings: Settings, r: redis.Redis) -> None:
    r.set(layout.jobs_key(MINUTE), "someone's string")
    recorder = Recorder()
    recorder.ended("app.mail", 0.01, False, NOW)
    recorder.picked("default", NOW - 1, NOW)
    flusher = flusher_for(settings, recorder)
    with structlog.testing.capture_logs() as logs:
        assert flusher.flush()
    assert r.get(layout.jobs_key(MINUTE)) == "someone's string"
    assert r.hget(layout.queues_key(MINUTE), "default|n") == "1"
    [line] = [e for e in logs if e["event"] == "metrics_key_wrong_type"]
    assert line["keys"] == [layout.jobs_key(MINUTE)]
    assert r.smembers(keys.GUARD_REQUESTS) == {layout.jobs_key(MINUTE)}
    assert flusher.pending == 0


def test_a_wrong_type_flush_record_keeps_the_flush_until_it_is_moved(
    settings: Settings, r: redis.Redis
) -> None:
    record = keys.metrics_flushed("host:1:abc")
    r.hset(record, "x", "1")
    recorder = Recorder()
    recorder.ended("app.mail", 0.01, False, NOW)
    flusher = flusher_for(settings, recorder)
    assert not flusher.flush()
    assert flusher.pending == 1 and not r.exists(layout.jobs_key(MINUTE))
    assert record in r.smembers(keys.GUARD_REQUESTS)
    r.delete(record)  # what the key guard does (it moves it aside)
    assert flusher.flush()
    assert r.hget(layout.jobs_key(MINUTE), "app.mail|p") == "1"


def test_redis_away_keeps_flushes_in_order_and_drops_the_oldest_past_the_bound(
    settings: Settings, r: redis.Redis, private_redis: RedisServer
) -> None:
    away = settings.model_copy(update={"redis_url": private_redis.url, "redis_timeout_s": 1.0})
    recorder = Recorder()
    flusher = Flusher(
        RedisContext.build(away),
        "host:2:x",
        recorder,
        queues=(),
        interval_s=60,
        clock=lambda: NOW,
        backlog_max=3,
    )
    private_redis.stop()
    with structlog.testing.capture_logs() as logs:
        for n in range(5):
            recorder.ended("app.mail", 0.001, False, NOW + 60 * n)
            assert not flusher.flush()
    assert flusher.pending == 3 and flusher.dropped == 2
    assert [e["event"] for e in logs].count("metrics_flush_failed") == 1
    [dropped] = [e for e in logs if e["event"] == "metrics_flushes_dropped"]
    assert dropped["dropped"] == 1  # logged at the first drop, then at most once a minute
    private_redis.start()
    with structlog.testing.capture_logs() as logs:
        assert flusher.flush()
    assert [e["event"] for e in logs] == ["metrics_flush_recovered"]
    client = private_redis.client()
    kept = [client.hget(layout.jobs_key(MINUTE + n), "app.mail|p") for n in range(5)]
    assert kept == [None, None, "1", "1", "1"]
    assert client.get(keys.metrics_flushed("host:2:x")) == "5"


def test_job_counts_hand_each_run_to_the_recorder(settings: Settings, r: redis.Redis) -> None:
    recorder = Recorder()
    counts = JobCounts(recorder)
    counts.add("default", "app.mail", 0.004)
    counts.add("default", "app.mail", 0.004, failed=True, dead=True)
    counts.ended_unrun("default", "app.mail", "expired")  # no run: not in the per-class metrics
    before = time.time()
    taken = recorder.take()
    [(key, (expire_at, amounts))] = taken.hashes.items()
    assert key == layout.jobs_key(layout.minute_of(before)) or key == layout.jobs_key(
        layout.minute_of(before) - 1
    )
    assert amounts["app.mail|p"] == 2 and amounts["app.mail|f"] == 1 and amounts["app.mail|ms"] == 8
    assert expire_at > before + layout.RETENTION_S - 60


@pytest.mark.parametrize("name", ["a|b"])
def test_a_class_name_holding_the_separator_is_written_with_it_replaced(name: str) -> None:
    recorder = Recorder()
    recorder.ended(name, 0.001, False, NOW)
    [(_, amounts)] = recorder.take().hashes.values()
    assert "a/b|p" in amounts


def test_sub_millisecond_runs_add_up_across_flushes() -> None:
    """Milliseconds go out whole, the fraction carried to the next flush: 30 runs of 0.4 ms over
    ten flushes total 12 ms, not 0."""
    recorder = Recorder()
    sent = 0
    for _ in range(10):
        for _ in range(3):
            recorder.ended("app.tiny", 0.0004, False, NOW)
        [(_, fields)] = recorder.take().hashes.values()
        sent += fields.get("app.tiny|ms", 0)
    assert sent in (11, 12)  # 12.0 in floats may come out a hair under
