"""supervisor/integrations/metrics.py: fed child messages as the supervisor would, scraped over real HTTP."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from cogworker.settings import Settings, load_settings
from cogworker.worker.settling.job_stats import JobCounts, bucket_key
from supervisor.integrations import metrics as metrics_module
from supervisor.integrations.metrics import SwarmMetrics
from tests.support.redis_server import RedisServer, free_port, wait_until


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on /metrics, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def status(busy: int = 0, threads: int = 10, quiet: bool = False, **extra: object) -> dict[str, object]:
    return {"event": "status", "busy": busy, "threads": threads, "processed": 0, "failed": 0, "redis": "up",
            "quiet": quiet, **extra}  # fmt: skip


@pytest.fixture
def served(redis_server: RedisServer, r: redis.Redis) -> Iterator[SwarmMetrics]:
    metrics = SwarmMetrics(load_settings(redis_url=redis_server.url, metrics_port=free_port()))
    metrics.start()
    try:
        yield metrics
    finally:
        metrics.stop()


def test_job_counts_and_durations_from_status_messages(served: SwarmMetrics) -> None:
    served.child_started(0, pid=100)
    served.observe_status(0, {"event": "ready", "pid": 100}, pid=100)
    entry = {
        "queue": "default",
        "job": "app.mail",
        "processed": 3,
        "failed": 1,
        "retried": 1,
        "dead": 0,
        "duration": {"sum_s": 70.5, "buckets": {"0.1": 2, "1": 1, "+Inf": 1}},
    }
    served.observe_status(0, status(busy=2, jobs=[entry]), pid=100)
    later = {
        "queue": "default",
        "job": "app.mail",
        "processed": 2,
        "duration": {"sum_s": 0.3, "buckets": {"0.2": 2}},
    }
    served.observe_status(0, status(jobs=[later]), pid=100)
    unrun = JobCounts()  # what a worker sends for jobs that ended without running
    unrun.ended_unrun("default", "app.mail", "expired")
    unrun.ended_unrun("default", "app.mail", "expired")
    unrun.ended_unrun("default", "app.mail", "cancelled")
    served.observe_status(0, status(jobs=unrun.take()), pid=100)
    assert served.port is not None
    samples = scrape(served.port)
    labels = {"queue": "default", "job": "app.mail"}
    assert value(samples, "cogworker_jobs_processed_total", **labels) == 5
    assert value(samples, "cogworker_jobs_failed_total", **labels) == 1
    assert value(samples, "cogworker_jobs_retried_total", **labels) == 1
    assert value(samples, "cogworker_jobs_dead_total", **labels) == 0
    assert value(samples, "cogworker_jobs_expired_total", **labels) == 2
    assert value(samples, "cogworker_jobs_cancelled_total", **labels) == 1
    buckets = {le: value(samples, "cogworker_job_duration_seconds_bucket", le=le, **labels)
               for le in ("0.05", "0.1", "0.25", "1.0", "3600.0", "+Inf")}  # fmt: skip
    # "0.2" is not one of our bounds: counted in the next larger one (0.25), never a smaller one.
    assert buckets == {"0.05": 0, "0.1": 2, "0.25": 4, "1.0": 5, "3600.0": 5, "+Inf": 6}
    assert value(samples, "cogworker_job_duration_seconds_count", **labels) == 6
    assert value(samples, "cogworker_job_duration_seconds_sum", **labels) == pytest.approx(70.8)


def test_children_by_state_and_threads(served: SwarmMetrics) -> None:
    served.child_started(0, pid=1)
    served.child_started(1, pid=2)
    served.child_started(1, pid=3)  # a phased restart: slot 1's replacement is booting
    served.observe_status(0, status(busy=4, threads=10), pid=1)
    served.observe_status(1, status(busy=1, threads=10, quiet=True), pid=2)
    served.observe_status(1, status(threads=10, booting=True, redis="down"), pid=3)
    assert served.port is not None
    samples = scrape(served.port)
    states = {
        s: value(samples, "cogworker_children", state=s) for s in ("booting", "ready", "quiet", "stopping")
    }
    assert states == {"booting": 1, "ready": 1, "quiet": 1, "stopping": 0}
    assert value(samples, "cogworker_busy_threads") == 5
    assert value(samples, "cogworker_threads") == 30
    assert value(samples, "cogworker_children_redis_down") == 1

    served.observe_status(1, {"event": "stopping"}, pid=2)
    served.observe_status(1, status(busy=1, quiet=True), pid=2)  # a status while draining stays stopping
    served.set_child_state(0, "stopping", pid=1)
    served.observe_status(1, {"event": "ready"}, pid=3)
    samples = scrape(served.port)
    assert value(samples, "cogworker_children", state="stopping") == 2
    assert value(samples, "cogworker_children", state="ready") == 1
    # The last counts may ride on `stopped`; a child that said `stopped` is no longer counted.
    last = {"queue": "q", "job": "j", "processed": 4}
    served.observe_status(1, {"event": "stopped", "code": 0, "jobs": [last]}, pid=2)
    served.child_exited(1, pid=2)
    served.child_exited(0, pid=1)
    samples = scrape(served.port)
    assert value(samples, "cogworker_children", state="stopping") == 0
    assert value(samples, "cogworker_threads") == 10
    assert value(samples, "cogworker_jobs_processed_total", queue="q", job="j") == 4


def test_restarts_and_recoveries(served: SwarmMetrics) -> None:
    for reason in ("crash", "crash", "memory", "hung", "signal", "restart", "gremlins"):
        served.child_restarted(reason)
    served.jobs_recovered(3, 0.02)
    served.jobs_recovered(0, 0.3)
    assert served.port is not None
    samples = scrape(served.port)
    assert value(samples, "cogworker_child_restarts_total", reason="crash") == 2
    assert (
        value(samples, "cogworker_child_restarts_total", reason="straggler") == 0
    )  # listed before it happens
    assert value(samples, "cogworker_child_restarts_total", reason="other") == 1
    assert value(samples, "cogworker_jobs_recovered_total") == 3
    assert value(samples, "cogworker_recovery_seconds_count") == 2
    assert value(samples, "cogworker_recovery_seconds_bucket", le="0.05") == 1


def test_stuck_jobs_and_stuck_replacements_are_counted(served: SwarmMetrics) -> None:
    served.observe_status(0, {"event": "stuck", "jid": "j1", "job": "app.hang", "queue": "default"}, pid=10)
    served.child_restarted("stuck")
    assert served.port is not None
    samples = scrape(served.port)
    assert value(samples, "cogworker_jobs_stuck_total") == 1
    assert value(samples, "cogworker_child_restarts_total", reason="stuck") == 1


def test_malformed_messages_are_counted_never_raised(
    served: SwarmMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_entries: list[object] = [
        "not a dict",
        {"queue": "q", "processed": 1},  # no job
        {"queue": "q", "job": "j", "processed": -1},
        {"queue": "q", "job": "j", "processed": True},
        {"queue": "q", "job": "j", "processed": 1.5},
        {"queue": "q", "job": "x" * 500, "processed": 1},
        {"queue": "q", "job": "j", "processed": 1, "duration": {"sum_s": float("nan"), "buckets": {}}},
        {"queue": "q", "job": "j", "processed": 1, "duration": {"sum_s": 1, "buckets": {"fast": 1}}},
        {"queue": "q", "job": "j", "processed": 1, "duration": [1, 2]},
    ]
    served.observe_status(0, status(jobs=bad_entries))
    served.observe_status(0, status(jobs="nope"))
    served.observe_status(0, {"event": "status", "busy": "lots", "threads": None, "jobs": None})
    served.observe_status(0, {"event": "weird"})
    assert served.port is not None
    samples = scrape(served.port)
    assert value(samples, "cogworker_metrics_bad_messages_total") == len(bad_entries) + 1
    assert not [k for k in samples if k[0] == "cogworker_jobs_processed_total"]  # nothing half-counted

    monkeypatch.setattr(metrics_module, "MAX_JOB_SERIES", 2)
    served.observe_status(
        0, status(jobs=[{"queue": "q", "job": f"gen{i}", "processed": 1} for i in range(5)])
    )
    samples = scrape(served.port)
    jobs = {dict(k[1])["job"]: v for k, v in samples.items() if k[0] == "cogworker_jobs_processed_total"}
    assert jobs == {"gen0": 1, "gen1": 1, "(other)": 3}


def test_queue_sizes_and_latency_are_read_from_redis_at_scrape_time(
    served: SwarmMetrics, r: redis.Redis
) -> None:
    now = time.time()
    for jid, age in (("old", 30), ("new", 1)):
        r.lpush(
            "cogworker:queue:default", json.dumps({"jid": jid, "queue": "default", "enqueued_at": now - age})
        )
    r.sadd("cogworker:queues", "default", "empty")
    r.sadd("cogworker:paused", "empty")
    r.zadd("cogworker:dead", {"x": 1, "y": 2})
    assert served.port is not None
    samples = scrape(served.port)
    assert value(samples, "cogworker_redis_up") == 1
    assert value(samples, "cogworker_queue_size", queue="default") == 2
    assert 29 < value(samples, "cogworker_queue_latency_seconds", queue="default") < 40
    assert value(samples, "cogworker_queue_latency_seconds", queue="empty") == 0
    assert value(samples, "cogworker_queue_paused", queue="empty") == 1
    assert value(samples, "cogworker_set_size", set="dead") == 2
    assert value(samples, "cogworker_set_size", set="retry") == 0


def test_a_hung_redis_makes_the_scrape_say_so_quickly(private_redis: RedisServer) -> None:
    metrics = SwarmMetrics(load_settings(redis_url=private_redis.url, metrics_port=free_port()))
    port = metrics.start()
    assert port is not None
    try:
        metrics.child_started(0)
        assert value(scrape(port), "cogworker_redis_up") == 1
        private_redis.pause()  # SIGSTOP: connections hang rather than fail

        def quick_scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            started = time.monotonic()
            samples = scrape(port)
            assert time.monotonic() - started < 3
            return samples

        # The reading before the pause may be served for REDIS_CACHE_S more.
        def down() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            samples = quick_scrape()
            return samples if value(samples, "cogworker_redis_up") == 0 else None

        samples = wait_until(down, message="redis_up 0")
        assert value(samples, "cogworker_children", state="booting") == 1  # the rest is still served
        private_redis.resume()
        private_redis.stop()  # refused outright
        wait_until(down, message="redis_up still 0")
    finally:
        metrics.stop()


def test_off_without_a_port_and_the_port_is_freed_on_stop(settings: Settings) -> None:
    off = SwarmMetrics(settings)
    assert off.start() is None
    assert b"cogworker_busy_threads 0.0" in off.render()
    port = free_port()
    on = SwarmMetrics(load_settings(redis_url=settings.redis_url, metrics_port=port))
    assert on.start() == port
    on.stop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_bucket_key_for_the_child_side() -> None:
    assert bucket_key(0.001) == "0.005"
    assert bucket_key(0.1) == "0.1"
    assert bucket_key(0.7) == "1.0"
    assert bucket_key(5000) == "+Inf"
