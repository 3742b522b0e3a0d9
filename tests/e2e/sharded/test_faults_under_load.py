"""Faults under load in the sharded layout: a slot migrated and a master SIGKILLed (its replica promoted)
while a swarm runs jobs of three queues, each queue on a master of its own. Each run is a line in a file
per queue, outside Redis (cluster_jobs.slow_note), so what the failover loses can't hide it.

- A migration (SETSLOT/MIGRATE, as `redis-cli --cluster reshard` does it) loses no job and runs none
  twice.
- A master killed: no job lost (every job was pushed, and replicated, before the kill); a job runs twice
  only if it was in flight from the killed master's partition (docs/sharding.md: at most each process's
  job threads plus its fetch reserve); and the other queues keep completing jobs between the kill and
  the promotion (they are judged by counts read at those two moments, not by a rate).

Each test has a cluster of its own (a killed master leaves its slots' new master without a replica,
which the package's shared cluster must not be left with), with a short node timeout so the promotion
comes in a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

import cogworker
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.support.daemon_env import use_only
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner

pytestmark = pytest.mark.slow

COUNT, CONCURRENCY = 2, 4
# What a process may hold from one partition at once: its job threads, and the fetch's reserve of half
# as many again while its jobs are short (docs/architecture.md, "Reliable fetch").
IN_FLIGHT = COUNT * (CONCURRENCY + CONCURRENCY // 2)
JOB_S = 0.005


@pytest.fixture
def private_cluster() -> Iterator[RedisCluster]:
    with contextlib.closing(RedisCluster(node_timeout_ms=2000)) as cluster:
        yield cluster


@pytest.fixture
def runner(private_cluster: RedisCluster, tmp_path: Path) -> Iterator[SwarmRunner]:
    with SwarmRunner(private_cluster.url(), tmp_path) as swarms:
        yield swarms


def master_of(cluster: RedisCluster, tag: str) -> int:
    return cluster.owner(key_slot(tag.encode()))[0]


def queues_by_master(cluster: RedisCluster) -> dict[int, str]:
    """One queue name per master, the queue's one partition in a slot that master serves."""
    found: dict[int, str] = {}
    index = 0
    while len(found) < 3:
        name = f"q{index}"
        found.setdefault(master_of(cluster, f"{name}#0"), name)
        index += 1
    return found


def ran(path: Path) -> Counter[str]:
    """How often each job finished: its tag's line (a start is `started-<tag>`)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(tag for line in lines if not (tag := line.split()[0]).startswith("started-"))


def start_load(
    cluster: RedisCluster,
    runner: SwarmRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    per_queue: dict[str, int],
) -> tuple[dict[str, Path], dict[str, set[str]], Swarm]:
    """Push `per_queue` jobs to each queue, then start a swarm reading every queue."""
    env = sharded_env(cluster, COGWORKER_REQUIRE="cluster_jobs")
    use_only(monkeypatch, env)
    import cluster_jobs

    sinks = {queue: tmp_path / f"{queue}.txt" for queue in per_queue}
    tags = {queue: {f"{queue}-{i}" for i in range(count)} for queue, count in per_queue.items()}
    # Pushed through the job API in the sharded layout; the one-slot layout bound again after.
    with configured_api(monkeypatch):
        for queue, count in per_queue.items():
            jobs = [(str(sinks[queue]), f"{queue}-{i}", JOB_S) for i in range(count)]
            cogworker.push_bulk(cluster_jobs.slow_note, jobs, queue=queue)
    swarm = runner.start(
        **env,
        COGWORKER_COUNT=str(COUNT),
        COGWORKER_CONCURRENCY=str(CONCURRENCY),
        # Equal weights: the queues drain side by side (bare names would be a strict order).
        COGWORKER_QUEUES=",".join(f"{queue}:1" for queue in per_queue),
        COGWORKER_LOG_LEVEL="warning",
    )
    return sinks, tags, swarm


def progress(sinks: dict[str, Path], swarm: Swarm) -> str:
    """For a failure's message: each queue's count of jobs done, and the swarm's last lines."""
    done = ", ".join(f"{queue} {sum(ran(path).values())}" for queue, path in sinks.items())
    return f"done: {done}\n{swarm.tail(40)}"


def test_a_slot_migrated_under_load_loses_no_job_and_runs_none_twice(
    private_cluster: RedisCluster, runner: SwarmRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queues = list(queues_by_master(private_cluster).values())
    sinks, tags, swarm = start_load(
        private_cluster, runner, tmp_path, monkeypatch, dict.fromkeys(queues, 400)
    )
    moved = queues[0]
    wait_until(
        lambda: all(sum(ran(sinks[q]).values()) >= 20 for q in queues),
        timeout=30,
        message=f"load: {progress(sinks, swarm)}",
    )
    before = {q: sum(ran(sinks[q]).values()) for q in queues}
    source, target = private_cluster.migrate(key_slot(f"{moved}#0".encode()))
    assert source != target
    # Every queue, the moved one too, goes on after the move; then every job has run exactly once.
    wait_until(
        lambda: all(sum(ran(sinks[q]).values()) > before[q] for q in queues),
        timeout=30,
        message=f"every queue after the move: {progress(sinks, swarm)}",
    )
    wait_until(
        lambda: all(set(ran(sinks[q])) >= tags[q] for q in queues),
        timeout=60,
        message=f"every job: {progress(sinks, swarm)}",
    )
    for queue in queues:
        counts = ran(sinks[queue])
        assert set(counts) == tags[queue]
        assert [tag for tag, n in counts.items() if n > 1] == []


def test_a_master_killed_under_load_stalls_only_its_queue_and_loses_no_job(
    private_cluster: RedisCluster, runner: SwarmRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_master = queues_by_master(private_cluster)
    home = master_of(private_cluster, "home")
    # The victim serves a queue and not the home slot (whose master every process's heartbeat needs).
    victim = next(port for port in by_master if port != home)
    hit = by_master[victim]
    others = [q for port, q in by_master.items() if port != victim]
    # The other queues' backlog outlasts the failover (node timeout 2 s, then the election).
    per_queue = {hit: 300, **dict.fromkeys(others, 1500)}
    sinks, tags, swarm = start_load(private_cluster, runner, tmp_path, monkeypatch, per_queue)
    wait_until(
        lambda: all(sum(ran(sinks[q]).values()) >= 30 for q in per_queue),
        timeout=30,
        message=f"load: {progress(sinks, swarm)}",
    )

    def others_done() -> int:
        return sum(sum(ran(sinks[q]).values()) for q in others)

    node = next(n for n in private_cluster.nodes if n.port == victim)
    assert node.proc is not None
    at_kill = others_done()
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(timeout=10)
    slot = key_slot(f"{hit}#0".encode())
    wait_until(
        lambda: private_cluster.owner(slot)[0] != victim,
        timeout=30,
        message=f"the replica promoted: {progress(sinks, swarm)}",
    )
    at_promotion = others_done()
    assert at_promotion > at_kill, "the other queues stopped while the killed master's slot had no master"

    every = {q: tags[q] for q in per_queue}
    wait_until(
        lambda: all(set(ran(sinks[q])) >= every[q] for q in per_queue), timeout=60, message="every job"
    )
    for queue in per_queue:
        counts = ran(sinks[queue])
        assert set(counts) == tags[queue]  # none lost, none invented
        twice = [tag for tag, n in counts.items() if n > 1]
        if queue != hit:
            assert twice == [], f"{queue} is on a master that stayed up"
        else:
            assert len(twice) <= IN_FLIGHT, twice
