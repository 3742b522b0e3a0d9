"""A real `cogworker run` worker in Sidekiq 7 mode with COGWORKER_SIDEKIQ_METRICS: the Python jobs it runs
are in Sidekiq 7's bare per-minute hashes and histograms (the layout: store/sidekiq_metrics_layout.py)."""

from __future__ import annotations

from collections.abc import Iterator

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import sidekiq_metrics_layout as sk
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

RECORD = "demo_jobs.record"
BOOM = "demo_jobs.boom_once"


@pytest.fixture
def mode7(settings: Settings) -> Iterator[Settings]:
    seven = settings.model_copy(update={"sidekiq_compat": "7"})
    cogworker.configure(seven)
    yield seven
    cogworker.configure(settings)


def sidekiq_counts(r: redis.Redis) -> dict[str, int]:
    found: dict[str, int] = {}
    for key in r.scan_iter(match="j|*"):
        for name, value in r.hgetall(key).items():
            found[name] = found.get(name, 0) + int(value)
    return found


def test_a_worker_writes_sidekiq_7s_metrics_for_python_jobs(
    workers: WorkerPool, r: redis.Redis, mode7: Settings
) -> None:
    worker = workers.start(
        COGWORKER_SIDEKIQ_COMPAT="7", COGWORKER_SIDEKIQ_METRICS="true", COGWORKER_METRICS_FLUSH_S="0.2"
    )
    for n in range(4):
        demo_jobs.record.perform_async(f"sk{n}")
    demo_jobs.boom_once.perform_async("fails")
    want = {f"{RECORD}|p": 4, f"{BOOM}|p": 1, f"{BOOM}|f": 1}

    def written() -> dict[str, int] | None:
        found = sidekiq_counts(r)
        return found if all(found.get(k) == v for k, v in want.items()) else None

    counts = wait_until(
        written,
        timeout=30,
        message="the five runs in Sidekiq's minute hashes",
    )
    assert f"{BOOM}|ms" not in counts  # a failed run's time is not Sidekiq's to count
    assert 0 <= counts.get(f"{RECORD}|ms", 0) < 4 * 5000
    histograms = list(r.scan_iter(match=f"{RECORD}-*"))
    assert histograms and all(0 < r.ttl(key) <= sk.TTL_S + 60 for key in histograms)
    runs = 0
    for key in histograms:
        fetch = [part for index in range(sk.BUCKETS) for part in ("GET", "u16", f"#{index}")]
        runs += sum(r.execute_command("BITFIELD_RO", key, *fetch))
    assert runs == 4
    assert worker.stop() == 0
