"""Per-class metrics from a real `cogworker run` worker: the jobs it runs, two classes (one failing),
are in the minute hashes with exact counts, plausible times, a histogram adding up to the runs, and
an expiry within the retention; with COGWORKER_METRICS off nothing is written."""

from __future__ import annotations

import demo_jobs
import redis

from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.store import metrics_layout as layout
from tests.support.metrics_store import minute_keys, summed
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

RECORD = "demo_jobs.record"
BOOM = "demo_jobs.boom_once"


def test_a_worker_writes_exact_counts_per_class(
    workers: WorkerPool, r: redis.Redis, configured: Settings
) -> None:
    worker = workers.start(COGWORKER_METRICS_FLUSH_S="0.2")
    for n in range(5):
        demo_jobs.record.perform_async(f"m{n}")
    for n in range(3):
        demo_jobs.boom_once.perform_async(f"fails {n}")
    want = {f"{RECORD}|p": 5, f"{BOOM}|p": 3, f"{BOOM}|f": 3}

    def written() -> dict[str, int]:
        found = summed(r, "j")
        return found if all(found.get(k) == v for k, v in want.items()) else {}

    jobs = wait_until(written, timeout=30, message="the eight runs in the minute hashes")
    assert f"{RECORD}|f" not in jobs  # a 0 is never written
    for name, runs in ((RECORD, 5), (BOOM, 3)):
        buckets = {k: v for k, v in jobs.items() if k.startswith(f"{name}|h")}
        assert sum(buckets.values()) == runs
        assert all(0 <= int(k.rpartition("|h")[2]) <= len(layout.BUCKET_BOUNDS_MS) for k in buckets)
        assert 0 <= jobs.get(f"{name}|ms", 0) < runs * 5000  # each ran well under 5 s
    queues = wait_until(lambda: (q := summed(r, "q")).get("default|n") == 8 and q, message="8 pickups")
    assert 0 <= queues.get("default|wait_ms", 0) < 8 * 30_000
    for key in minute_keys(r, "j") + minute_keys(r, "q"):
        assert layout.RETENTION_S - 120 < r.ttl(key) <= layout.RETENTION_S + 60
    identity = worker.identity()
    assert worker.stop() == 0
    assert int(r.get(keys.metrics_flushed(identity)) or 0) >= 1
    assert summed(r, "j") == jobs  # the last flush at the stop added nothing twice


def test_metrics_off_writes_no_metrics_key(workers: WorkerPool, r: redis.Redis, configured: Settings) -> None:
    worker = workers.start(COGWORKER_METRICS="off", COGWORKER_METRICS_FLUSH_S="0.2")
    demo_jobs.record.perform_async("off")
    wait_until(lambda: r.llen("test:ran") == 1, message="the job run")
    assert worker.stop() == 0
    assert list(r.scan_iter(match=f"{keys.PREFIX}metrics:*")) == []


def test_a_redis_refusing_the_flush_costs_the_metrics_not_the_jobs(
    workers: WorkerPool, r: redis.Redis, configured: Settings
) -> None:
    # Everything a worker needs, but HINCRBY: the flush script fails on its first write, every time.
    r.acl_setuser("nometrics", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-hincrby"])
    try:
        url = configured.redis_url.replace("redis://", "redis://nometrics:pw@")
        worker = workers.start(url, COGWORKER_METRICS_FLUSH_S="0.1")
        for n in range(20):
            demo_jobs.record.perform_async(f"r{n}")
        wait_until(lambda: r.llen("test:ran") == 20, message="every job run")
        wait_until(lambda: worker.events_named("metrics_flush_failed"), message="the refusal logged")
        assert worker.stop() == 0
        assert len(worker.events_named("metrics_flush_failed")) == 1
        assert not worker.events_named("metrics_flush_error")
        assert summed(r, "j") == {}
    finally:
        r.acl_deluser("nometrics")
