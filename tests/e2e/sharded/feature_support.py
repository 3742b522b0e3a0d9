"""What the sharded feature tests share (test_feature_*.py): the job API configured for the queue "fq"
in three partitions, workers of the sharded deployment running tests/apps/sharded_feature_jobs.py, and
reads of what they left (the runs, in a file outside the cluster; the partitions, through redis-py's own
cluster client)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker import codec
from cogworker.api import push_shards
from cogworker.store import shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import Worker, WorkerPool

QUEUE = "fq"
PARTS = tuple(shards.Partition(QUEUE, i) for i in range(3))
QUICK = {
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.3",
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "1",
    "COGWORKER_POLL_INTERVAL_S": "1",
}


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The job API of this (the test's) process, configured as the sharded deployment's."""
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS=f"{QUEUE}=3"):
        yield


@pytest.fixture
def out(tmp_path: Path) -> str:
    return str(tmp_path / "runs")


def lines(out: str, kind: str) -> Counter[str]:
    """The tags of the `<kind>-<tag>` lines the jobs wrote."""
    text = Path(out).read_text() if os.path.exists(out) else ""
    mark = kind + "-"
    return Counter(line.split()[0].removeprefix(mark) for line in text.splitlines() if line.startswith(mark))


def deployment_env(redis_cluster: RedisCluster, **extra: str) -> dict[str, str]:
    """The deployment's settings; `extra` may replace any (COGWORKER_KEY_PREFIX: another deployment)."""
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_feature_jobs",
        COGWORKER_QUEUES=QUEUE,
        COGWORKER_QUEUE_PARTITIONS=f"{QUEUE}=3",
        COGWORKER_LOG_LEVEL="info",
    )
    return env | extra


def start(workers: WorkerPool, redis_cluster: RedisCluster, **extra: str) -> Worker:
    env = deployment_env(redis_cluster, **extra)
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def user_call(redis_cluster: RedisCluster, code: str, **extra: str) -> str:
    """`code` as a user's first call: a fresh interpreter configured only by the deployment's env."""
    env = deployment_env(redis_cluster, **extra)
    return first_call(code, env.pop("COGWORKER_REDIS_URL"), **env)


def partition_of(jid: str) -> shards.Partition:
    return push_shards.partition_of({"queue": QUEUE, "jid": jid})


def queued_anywhere(cluster: redis.RedisCluster) -> int:
    return sum(int(cluster.llen(shards.queue_key(p))) for p in PARTS)


def jids_in(cluster: redis.RedisCluster, family: str) -> list[str]:
    """The jids in every partition's `family` set (retry, dead, schedule)."""
    found = []
    for p in PARTS:
        for raw in cluster.zrange(getattr(shards, family)(p), 0, -1):
            found.append(str(codec.loads(raw)["jid"]))
    return found


def stat_sum(cluster: redis.RedisCluster, name: str) -> int:
    return sum(int(cluster.get(shards.stat(p, name)) or 0) for p in PARTS)


def shown_running(jid: str) -> bool:
    """The job is in a live process's work hash (home slot), which `cancel` reads to say "running"."""
    from cogworker.api import client as cw_client
    from cogworker.ops import processes

    return any(job.jid == jid for p in processes.processes(cw_client.connection()) for job in p.running)
