"""A batch on a real Redis Cluster: its members and its callback run through the batch scripts, which
touch the batch's hash, its pending set, the queues and the counters in one call each, so they rely on
the deployment's hash-tagged prefix keeping every one of those keys in the same slot."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.redis_cluster import PREFIX
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow


def test_a_batch_runs_its_members_then_its_callback_once_on_a_cluster(
    cluster: redis.RedisCluster, workers: WorkerPool, env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "ran.txt"
    cw_client.configure(load_settings())
    import cluster_jobs

    with cogworker.batch("on a cluster", on_success=cluster_jobs.batch_done, callback_args=(str(out),)) as b:
        for tag in ("m1", "m2", "m3"):
            cluster_jobs.note.perform_async(str(out), tag)
    workers.start(**env)

    def ran() -> list[str]:
        return [line.split()[0] for line in out.read_text().splitlines()] if out.exists() else []

    wait_until(lambda: "callback" in ran(), timeout=30, message="the batch's callback")
    assert sorted(ran()[:3]) == ["m1", "m2", "m3"] and ran()[3:] == ["callback"]
    assert out.read_text().splitlines()[3].split()[1] == b.bid
    status = cogworker.batch_status(b.bid)
    assert status is not None and (status.total, status.pending, status.done, status.failed) == (3, 0, 3, 0)
    # Every key the batch wrote is the deployment's: in its slot, under its prefix.
    assert all(key.startswith(PREFIX) for key in cluster.keys("*"))
