"""A TLS-only deployment on a Redis Cluster: `rediss+cluster://` with the COGWORKER_REDIS_SSL_* files
(a CA, and the client certificate the nodes demand on their TLS ports). The seed nodes, when asked
over TLS, name their TLS ports, and every connection (the pinned pool's, the discovery's) presents
the certificate; a worker runs jobs pushed from a fresh interpreter, follows a failover of the slot's
master, and the CLI reads the cluster the same way."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_env import run_cogworker as run
from tests.support.redis_cluster import SLOT, RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[RedisCluster]:
    with contextlib.closing(RedisCluster(tls=True)) as cluster:
        yield cluster


def push(env: dict[str, str], out: Path, tag: str) -> None:
    done = run(
        env,
        code=f"""
        import cluster_jobs
        cluster_jobs.note.perform_async({str(out)!r}, {tag!r})
        """,
    )
    assert done.returncode == 0, done.stderr


def tags(path: Path) -> set[str]:
    return {line.split()[0] for line in path.read_text().splitlines()} if path.exists() else set()


def test_a_worker_over_tls_runs_jobs_through_a_failover(tls_cluster: RedisCluster, tmp_path: Path) -> None:
    env = tls_cluster.env(COGWORKER_HEARTBEAT_INTERVAL_S="0.3")
    assert env["COGWORKER_REDIS_URL"].startswith("rediss+cluster://")
    out = tmp_path / "ran.txt"
    workers = WorkerPool(env["COGWORKER_REDIS_URL"])
    try:
        worker = workers.start(**env)
        worker.identity()
        push(env, out, "before")
        wait_until(
            lambda: "before" in tags(out), timeout=20, message=f"the job:\n{worker.log_text()[-2000:]}"
        )

        tls_cluster.failover(SLOT)
        push(env, out, "after")
        wait_until(
            lambda: "after" in tags(out), timeout=30, message=f"the job after:\n{worker.log_text()[-2000:]}"
        )
        status = run(env, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert [p["identity"] for p in json.loads(status.stdout)["processes"]] == [worker.identity()]
        assert worker.stop() == 0
    finally:
        workers.close()
    # Without the client certificate the nodes refuse the handshake: a clear error, exit 1, no hang.
    bare = {k: v for k, v in env.items() if "CERT" not in k and "KEY_FILE" not in k}
    refused = run(bare, "status")
    assert refused.returncode == 1 and "can't reach Redis" in refused.stderr, refused.stderr
    # The nodes' reason is in the line (under TLS 1.3 a refused certificate reads as an EOF).
    assert "certificate required" in refused.stderr or "EOF occurred" in refused.stderr, refused.stderr
