"""What the sharded batch tests share (test_batches.py, test_batch_crashes.py): the job API configured
for the sharded deployment with the batch queues' partitions, workers running tests/apps/
sharded_batch_jobs.py, and reads of what their runs recorded (a file outside the cluster)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker.settings import load_settings
from cogworker.store import keys, outbox, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_cluster import RedisCluster
from tests.support.workers import WorkerPool

# Members over four partitions (on the three masters, as the cluster spreads their slots), callbacks
# over two.
PARTITIONS = "bq=4,cbq=2"
MEMBERS = [shards.Partition("bq", i) for i in range(4)]
CALLBACKS = [shards.Partition("cbq", i) for i in range(2)]


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS=PARTITIONS):
        yield


@pytest.fixture
def layout(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process names keys as the deployment does (no job API configured); one-slot after."""
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", PARTITIONS)
    shards.use_settings(load_settings())
    yield
    one_slot()


def worker_env(redis_cluster: RedisCluster, out: Path, **extra: str) -> dict[str, str]:
    values = {
        "COGWORKER_REQUIRE": "sharded_batch_jobs",
        "COGWORKER_QUEUES": "bq,cbq",
        "COGWORKER_QUEUE_PARTITIONS": PARTITIONS,
        "SHARDED_TEST_OUT": str(out),
        "COGWORKER_LOG_LEVEL": "info",
        **extra,
    }
    return sharded_env(redis_cluster, **values)


def start(workers: WorkerPool, redis_cluster: RedisCluster, out: Path, **extra: str) -> Any:
    env = worker_env(redis_cluster, out, **extra)
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def lines(out: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in out.read_text().splitlines() if line.startswith(kind + " ")]


def ran(out: Path) -> Counter[str]:
    return Counter(tag for tag, *_ in lines(out, "ran"))


def callbacks(out: Path, bid: str) -> Counter[str]:
    """How often each callback of batch `bid` ran."""
    return Counter(kind for kind, _label, cb_bid, *_ in lines(out, "cb") if cb_bid == bid)


def never_early(out: Path) -> bool:
    return all(rest[-1] == "after" for rest in lines(out, "cb"))


def outboxes_empty(cluster: redis.RedisCluster) -> bool:
    every = [outbox.key(p) for p in (*MEMBERS, *CALLBACKS)] + [keys.OUTBOX]
    return all(cluster.hlen(name) == 0 for name in every)


def drained(cluster: redis.RedisCluster) -> bool:
    """Every outbox moved and every queue list empty: a callback pushed twice would be seen by now."""
    lists = [shards.queue_key(p) for p in (*MEMBERS, *CALLBACKS)]
    return outboxes_empty(cluster) and all(cluster.llen(name) == 0 for name in lists)


def all_ran(out: Path, bid: str, kinds: dict[str, int]) -> bool:
    return callbacks(out, bid) == kinds
