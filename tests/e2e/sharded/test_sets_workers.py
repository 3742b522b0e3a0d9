"""Operators and real sharded workers together (h39-push and h39-worker merged to test the two ends): a
job a worker filed in its partition's dead set, retried from the sets' operations, runs again from that
partition's queue, once; one killed from the retry set lands in that partition's dead set and its death
notice is handled by the worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker import settings as settings_module
from cogworker.ops import set_actions
from cogworker.ops import sets as set_ops
from cogworker.store import keys, shards
from cogworker.store.lazy_client import LazyClient
from tests.e2e.sharded.sets_support import one_slot
from tests.e2e.sharded.worker_support import events, seed, start
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

PARTITIONS = "hot=3"


@pytest.fixture
def operator(
    env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LazyClient]:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", PARTITIONS)
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    lazy = LazyClient(loaded)
    yield lazy
    lazy.close()
    one_slot()


def test_a_dead_job_retried_by_an_operator_runs_again_from_its_partition(
    operator: LazyClient,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    workers: WorkerPool,
    out: Path,
) -> None:
    hot = [shards.Partition("hot", i) for i in range(3)]
    jid = seed(cluster, hot[2], "dies", "d1")
    shards.record_partitions(operator.client, "hot")
    start(workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS=PARTITIONS)
    wait_until(lambda: len(events(out, "death")) == 1, timeout=30, message="filed in dead")
    listed = set_ops.entries(operator.client, "dead")
    assert [(e.jid, e.partition) for e in listed] == [(jid, hot[2])]
    set_actions.retry_now(operator.client, operator.scripts, "dead", jid)
    wait_until(lambda: len(events(out, "death")) == 2, timeout=30, message="ran again and died again")
    assert [e.partition for e in set_ops.entries(operator.client, "dead")] == [hot[2]]
    assert all(cluster.zcard(shards.dead(p)) == 0 for p in hot[:2]) and cluster.zcard(keys.DEAD) == 0


def test_a_retry_entry_killed_by_an_operator_is_heard_of_by_the_workers_death_hook(
    operator: LazyClient,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    workers: WorkerPool,
    out: Path,
) -> None:
    hot = [shards.Partition("hot", i) for i in range(3)]
    jid = seed(cluster, hot[1], "fails", "f1")
    shards.record_partitions(operator.client, "hot")
    start(workers, redis_cluster, out, "hot", COGWORKER_QUEUE_PARTITIONS=PARTITIONS)
    wait_until(lambda: set_ops.size(operator.client, "retry") == 1, timeout=30, message="filed in retry")
    killed = set_actions.kill(operator.client, operator.scripts, operator.settings, "retry", jid)
    assert killed.partition == hot[1]
    wait_until(lambda: len(events(out, "death")) == 1, timeout=30, message="the death notice handled")
    assert events(out, "death") == [[jid, "killed"]]
    assert cluster.zcard(shards.dead(hot[1])) == 1 and set_ops.size(operator.client, "retry") == 0
