"""One master of the cluster stopped or failed over while a sharded worker runs: only its partitions
stall, and no job is lost or run twice (worker/fetching/partition_health.py)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import redis
from redis.crc import key_slot

from cogworker.store import shards
from tests.e2e.sharded import worker_support
from tests.e2e.sharded.worker_support import (
    events,
    in_progress_lists,
    master_of,
    queues_on_two_masters,
    seed,
    start,
    stat_sum,
)
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

CLUSTER_DOWN = re.compile(r"CLUSTERDOWN|ClusterDown")

# The shared fixtures, used here by name.
layout = worker_support.layout


def test_a_stopped_master_stalls_only_its_own_queues(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    stalled, running = queues_on_two_masters(redis_cluster)
    stalled_p, running_p = shards.Partition(stalled), shards.Partition(running)
    port = master_of(redis_cluster, stalled_p)
    node = next(n for n in redis_cluster.nodes if n.port == port)
    assert node.proc is not None
    worker = start(workers, redis_cluster, out, f"{stalled},{running}", COGWORKER_REDIS_TIMEOUT_S="2")
    seed(cluster, stalled_p, "mark", "before")
    wait_until(lambda: events(out, "ran"), timeout=30, message="the worker runs")
    # Jobs waiting on the stalled master's queue when it stops (seeded first: its slot is then away).
    for n in range(5):
        seed(cluster, stalled_p, "mark", f"stalled.{n}")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        for n in range(20):
            seed(cluster, running_p, "mark", f"running.{n}")
        wait_until(
            lambda: sum(tag.startswith("running.") for tag, _pid in events(out, "ran")) == 20,
            timeout=20,
            message="the other master's queue kept running",
        )
        # Within a couple of client timeouts, not stalled until the failover (or the master's return).
        assert time.monotonic() - began < 12
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    # The stopped master's replica takes over (or the master comes back): its jobs run then, once.
    wait_until(
        lambda: sum(tag.startswith("stalled.") for tag, _pid in events(out, "ran")) == 5,
        timeout=60,
        message="the stalled queue's jobs ran once its slot was served again",
    )
    redis_cluster.wait_ok()
    ran = Counter(tag for tag, _pid in events(out, "ran"))
    assert all(n == 1 for n in ran.values()), ran
    # The fetcher met the outage and skipped the partition, then found it served again. Another
    # partition is skipped only for the cluster's CLUSTERDOWN: with cluster-require-full-coverage
    # (Redis's default) every node refuses from when the stopped master is marked failed until its
    # replica is promoted, which a loaded machine can reach before the other queue's 20 jobs ran.
    skipped = {e["partition"]: e["error"] for e in worker.events_named("partition_unavailable")}
    assert f"{stalled}#0" in skipped, skipped
    assert all(CLUSTER_DOWN.search(error) for p, error in skipped.items() if p != f"{stalled}#0"), skipped
    assert worker.events_named("partition_available")


def test_a_failover_of_one_partitions_master_mid_run_loses_and_repeats_nothing(
    layout: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: Path
) -> None:
    first, other = queues_on_two_masters(redis_cluster)
    parts = [shards.Partition(first), shards.Partition(other)]
    tags = []
    for n in range(60):
        tag = f"{parts[n % 2].queue}.{n}"
        seed(cluster, parts[n % 2], "mark", tag, 0.05)
        tags.append(tag)
    start(workers, redis_cluster, out, f"{first},{other}", COGWORKER_CONCURRENCY="4")
    wait_until(lambda: len(events(out, "ran")) >= 10, timeout=30, message="jobs running")
    # A coordinated failover (no write lost) while jobs of that partition run and wait for their acks.
    redis_cluster.failover(key_slot(f"{first}#0".encode()))
    wait_until(lambda: len(events(out, "ran")) >= len(tags), timeout=60, message="every job ran")
    ran = Counter(tag for tag, _pid in events(out, "ran"))
    assert ran == Counter(tags)
    wait_until(lambda: stat_sum(cluster, parts, "processed") == len(tags), timeout=30, message="all acked")
    wait_until(lambda: not any(in_progress_lists(cluster, parts).values()), timeout=15, message="lists empty")
