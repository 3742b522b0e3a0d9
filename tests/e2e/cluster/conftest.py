"""Fixtures for the Redis Cluster tests: one real 3-master + 3-replica cluster for this folder
(tests/support/redis_cluster.py; ~5 s to start), flushed before each test. cogworker reaches it by its
cluster URL with a hash-tagged key prefix, so all of a deployment's keys are in one slot.

The TLS folder's conftest has the same `env`, `workers` and `swarms` fixtures over its own server; what
differs is the server and how a test starts clean (a flush here, a flush and an ACL check there)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.daemon_env import use_only
from tests.support.redis_cluster import RedisCluster
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool, worker_pool


@pytest.fixture(scope="package")
def redis_cluster() -> Iterator[RedisCluster]:
    with contextlib.closing(RedisCluster()) as cluster:
        yield cluster


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """redis-py's own cluster client (the tests' view of what cogworker wrote), on a flushed cluster."""
    redis_cluster.wait_ok()  # an earlier test may have moved the slot
    redis_cluster.flush()
    with contextlib.closing(redis_cluster.cluster_client()) as client:
        yield client


@pytest.fixture
def env(redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment set for the cluster only (the in-process client and Web UI read it)."""
    return use_only(monkeypatch, redis_cluster.env())


@pytest.fixture
def workers(redis_cluster: RedisCluster, cluster: redis.RedisCluster) -> Iterator[WorkerPool]:
    yield from worker_pool(redis_cluster.url())


@pytest.fixture
def swarms(redis_cluster: RedisCluster, cluster: redis.RedisCluster, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_cluster.url(), tmp_path)
