"""Fixtures for the sharded layout's tests (COGWORKER_CLUSTER_SHARDING=queues, store/shards.py): one
real 3-master + 3-replica cluster for this folder (tests/support/redis_cluster.py), flushed before
each test. The deployment's prefix carries no hash tag: the layout tags each queue partition itself.

Queue names are chosen so their partitions' slots fall on different masters (`spread_queues`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.e2e.sharded.sets_support import one_slot
from tests.support.daemon_env import use_only
from tests.support.redis_cluster import RedisCluster
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool, worker_pool

PREFIX = "cw:"
SHARDED = {"COGWORKER_KEY_PREFIX": PREFIX, "COGWORKER_CLUSTER_SHARDING": "queues"}


@pytest.fixture(scope="package")
def redis_cluster() -> Iterator[RedisCluster]:
    with contextlib.closing(RedisCluster()) as cluster:
        yield cluster


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """redis-py's own cluster client (the tests' view of what cogworker wrote), on a flushed cluster."""
    redis_cluster.wait_ok()  # an earlier test may have moved a slot
    redis_cluster.flush()
    with contextlib.closing(redis_cluster.cluster_client()) as client:
        yield client


def sharded_env(redis_cluster: RedisCluster, **extra: str) -> dict[str, str]:
    """COGWORKER_* settings for a process of the sharded deployment on this cluster."""
    return redis_cluster.env(**SHARDED, **extra)


@pytest.fixture
def env(redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment set for the sharded deployment only."""
    return use_only(monkeypatch, sharded_env(redis_cluster))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The file a test's jobs record their runs in (SHARDED_TEST_OUT): outside the cluster under test."""
    path = tmp_path / "events"
    path.touch()
    return path


@pytest.fixture
def workers(redis_cluster: RedisCluster, cluster: redis.RedisCluster) -> Iterator[WorkerPool]:
    yield from worker_pool(redis_cluster.url())


@pytest.fixture
def swarms(redis_cluster: RedisCluster, cluster: redis.RedisCluster, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_cluster.url(), tmp_path)


@pytest.fixture(autouse=True)
def _one_slot_after() -> Iterator[None]:
    """Every test here binds the sharded layout in this process; the next folder's tests expect the
    one-slot names back."""
    yield
    one_slot()
