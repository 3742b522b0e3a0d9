"""Fixtures for the Redis Cluster tests: one real 3-master + 3-replica cluster for this folder
(tests/support/redis_cluster.py; ~5 s to start), flushed before each test. cogworker reaches it by its
cluster URL with a hash-tagged key prefix, so all of a deployment's keys are in one slot."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_cluster import RedisCluster
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool


@pytest.fixture(scope="package")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> Iterator[redis.RedisCluster]:
    """redis-py's own cluster client (the tests' view of what cogworker wrote), on a flushed cluster."""
    redis_cluster.wait_ok()  # an earlier test may have moved the slot
    redis_cluster.flush()
    client = redis_cluster.cluster_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def env(redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment set for the cluster only (the in-process client and Web UI read it)."""
    for name in list(os.environ):
        if name.startswith("COGWORKER_"):
            monkeypatch.delenv(name)
    values = redis_cluster.env()
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def workers(redis_cluster: RedisCluster, cluster: redis.RedisCluster) -> Iterator[WorkerPool]:
    pool = WorkerPool(redis_cluster.url())
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def swarms(redis_cluster: RedisCluster, cluster: redis.RedisCluster, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_cluster.url(), tmp_path)
