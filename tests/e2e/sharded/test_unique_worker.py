"""Real sharded workers releasing unique claims, on a real 3-master cluster: the claim lives in the home
slot (`cw:{home}:unique:<digest>`), the job in one partition of its queue, and every end of the job
that is final (a success, a failure for good, a poison pill's burial) releases the claim, owner-checked,
on the home slot's client (api/unique.py, store/locks.py); a job recovered from a SIGKILLed worker keeps
its claim until its run after recovery. Each run is noted in a file (tests/apps/sharded_unique_jobs.py)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sharded_unique_jobs as uj
from redis.crc import key_slot

from cogworker import codec
from cogworker.api import push_shards
from cogworker.store import keys, shards
from cogworker.store.locks import unique_digest
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

PARTS = tuple(shards.Partition("uq", i) for i in range(3))
QUICK = {
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.3",
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "1",
    "COGWORKER_POLL_INTERVAL_S": "1",
}
DEAD_OWNER = "gone:1:dead"


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="uq=3"):
        yield


@pytest.fixture
def out(tmp_path: Path) -> str:
    return str(tmp_path / "runs")


def claim_key(fn: Any, *args: Any) -> str:
    return keys.unique(unique_digest({"class": fn.name, "queue": "uq", "args": list(args), "kwargs": {}}))


def lines(out: str, kind: str) -> Counter[str]:
    text = Path(out).read_text() if os.path.exists(out) else ""
    mark = kind + "-"
    return Counter(line.split()[0].removeprefix(mark) for line in text.splitlines() if line.startswith(mark))


def start(workers: WorkerPool, redis_cluster: RedisCluster, **extra: str) -> Worker:
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_unique_jobs",
        COGWORKER_QUEUES="uq",
        COGWORKER_QUEUE_PARTITIONS="uq=3",
        COGWORKER_LOG_LEVEL="info",
        **extra,
    )
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def queued_anywhere(cluster: redis.RedisCluster) -> int:
    return sum(int(cluster.llen(shards.queue_key(p))) for p in PARTS)


def dead_jids(cluster: redis.RedisCluster) -> list[str]:
    return [str(codec.loads(raw)["jid"]) for p in PARTS for raw in cluster.zrange(shards.dead(p), 0, -1)]


@pytest.mark.timeout(90)
def test_a_worker_runs_the_job_and_releases_its_claim_then_a_new_push_goes(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    key = claim_key(uj.mark, out, "a")
    jid = uj.mark.perform_async(out, "a")
    assert jid is not None and uj.mark.perform_async(out, "a") is None
    assert cluster.get(key) == jid
    worker = start(workers, redis_cluster)
    wait_until(lambda: lines(out, "ran") == Counter(["a"]), timeout=45, message="the job run")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="its claim released")
    again = uj.mark.perform_async(out, "a")
    assert again is not None and again != jid
    wait_until(lambda: lines(out, "ran") == Counter(["a", "a"]), timeout=30, message="the second copy run")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="the second claim released")
    assert queued_anywhere(cluster) == 0
    assert worker.stop() == 0


@pytest.mark.timeout(90)
def test_a_job_failing_for_good_is_filed_in_dead_and_releases_its_claim(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    key = claim_key(uj.dies, out, "d")
    jid = uj.dies.perform_async(out, "d")
    assert jid is not None
    worker = start(workers, redis_cluster)
    wait_until(lambda: dead_jids(cluster) == [jid], timeout=45, message="filed in its partition's dead set")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="its claim released")
    assert lines(out, "tried") == Counter(["d"])
    assert uj.dies.perform_async(out, "d") is not None
    assert worker.stop() == 0


@pytest.mark.timeout(90)
def test_a_poison_pill_buried_by_a_workers_recovery_releases_its_claim(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """As a job that killed its process max_orphanings times leaves it: on a dead owner's in-progress
    list in its partition, its orphan count at the limit. A live worker's recovery buries it."""
    key = claim_key(uj.mark, out, "pill")
    jid = uj.mark.perform_async(out, "pill")
    assert jid is not None
    p = push_shards.partition_of({"queue": "uq", "jid": jid})
    raw = cluster.rpop(shards.queue_key(p))
    cluster.lpush(shards.in_progress(p, DEAD_OWNER), raw)
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER)
    cluster.set(shards.orphanings(p, jid), 3)  # settings.max_orphanings
    worker = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: dead_jids(cluster) == [jid], timeout=45, message="buried in its partition's dead set")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="its claim released")
    assert worker.events_named("poison_pill_to_dead")
    assert lines(out, "ran") == Counter()  # never run
    assert uj.mark.perform_async(out, "pill") is not None
    assert worker.stop() == 0


@pytest.mark.timeout(90)
def test_a_dead_filing_handed_over_and_filed_by_a_workers_poller_releases_its_claim(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """As a stopping worker whose partition's master didn't answer leaves it (worker/settling/handover.py):
    the dead filing on its partition's `unsettled` list, the claim still held. Another worker's poller
    files it (partition_unsettled.py) and releases the claim on the home slot's client."""
    key = claim_key(uj.dies, out, "u")
    jid = uj.dies.perform_async(out, "u")
    assert jid is not None
    p = push_shards.partition_of({"queue": "uq", "jid": jid})
    payload = codec.loads(cluster.rpop(shards.queue_key(p)))
    payload.update(error_class="ValueError", error_message="u fails for good", failed_at=time.time())
    record = {"set": shards.dead(p), "score": time.time(), "payload": payload}
    cluster.rpush(f"{p.prefix}unsettled", codec.dumps(record))
    assert cluster.get(key) == jid
    worker = start(workers, redis_cluster, COGWORKER_POLL_INTERVAL_S="0.5")
    wait_until(lambda: dead_jids(cluster) == [jid], timeout=45, message="filed in its partition's dead set")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="its claim released")
    assert cluster.llen(f"{p.prefix}unsettled") == 0
    assert lines(out, "tried") == Counter()  # filed, never run
    assert worker.stop() == 0


@pytest.mark.timeout(150)
def test_a_job_of_a_sigkilled_worker_keeps_its_claim_until_its_run_after_recovery(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    key = claim_key(uj.hold_first, out, "k")
    jid = uj.hold_first.perform_async(out, "k")
    assert jid is not None
    victim = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "started") == Counter(["k"]), timeout=45, message="the job started")
    victim.kill()
    # Orphaned, then recovered: the claim stays the job's, and a copy pushed meanwhile is a duplicate.
    assert cluster.get(key) == jid
    assert uj.hold_first.perform_async(out, "k") is None
    rescuer = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "ran") == Counter(["k"]), timeout=60, message="run again after recovery")
    wait_until(lambda: cluster.exists(key) == 0, timeout=15, message="its claim released")
    assert sum(int(e["moved"]) for e in rescuer.events_named("requeued_orphans")) == 1
    # A new copy, scheduled: its claim is its own, and nothing of the old copy's releases it.
    later = uj.hold_first.perform_in(3600, out, "k")
    assert later is not None and cluster.get(key) == later
    assert rescuer.stop() == 0
    assert cluster.get(key) == later
    assert lines(out, "ran") == Counter(["k"]) and queued_anywhere(cluster) == 0


@pytest.mark.timeout(120)
def test_a_release_the_home_master_missed_is_made_by_the_poller_once_it_answers(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """The job ends in its partition (another master) while the home slot's master is stopped: the
    release times out, is kept, and the worker's poller makes it once the master answers again."""
    home_master = redis_cluster.owner(key_slot(b"home"))[0]
    payload = next(
        built
        for built in (uj.gated.build((out, "h"), {}) for _ in range(100))
        if redis_cluster.owner(key_slot(_tag(push_shards.partition_of(built))))[0] != home_master
    )
    key = claim_key(uj.gated, out, "h")
    worker = start(workers, redis_cluster, COGWORKER_REDIS_TIMEOUT_S="0.5", COGWORKER_POLL_INTERVAL_S="0.5")
    worker.identity()
    assert uj.gated.send(payload) == payload["jid"]
    wait_until(lambda: lines(out, "started") == Counter(["h"]), timeout=45, message="the job started")
    node = next(n for n in redis_cluster.nodes if n.port == home_master)
    assert node.proc is not None
    pid = node.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        Path(f"{out}.h.go").touch()
        wait_until(lambda: lines(out, "ran") == Counter(["h"]), timeout=15, message="the job done")
        wait_until(lambda: _release_failed(worker), timeout=5, message="its release failed and kept")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: cluster.exists(key) == 0, timeout=30, message="the kept release made by the poller")
    assert worker.stop() == 0
    redis_cluster.wait_ok()


@pytest.mark.timeout(150)
def test_a_worker_killed_between_the_jobs_end_and_its_release_leaves_the_claim_to_its_ttl(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """The worst moment: the job ended in its partition, its release (home slot) not made, the worker
    SIGKILLed. The claim is never freed early: it stays the job's until its run after recovery releases
    it (if its ack was not sent) or its `unique_for` ends it, and a copy pushed meanwhile is refused."""
    home_master = redis_cluster.owner(key_slot(b"home"))[0]
    # Longer than a recovery takes here: a claim whose `unique_for` ends while its job still waits lets a
    # copy in beside it, as `unique_for` says (in either layout).
    short = uj.gated.set(unique_for=30)
    payload = next(
        built
        for built in (short.build((out, "w"), {}) for _ in range(100))
        if redis_cluster.owner(key_slot(_tag(push_shards.partition_of(built))))[0] != home_master
    )
    key = claim_key(uj.gated, out, "w")
    victim = start(workers, redis_cluster, COGWORKER_REDIS_TIMEOUT_S="0.5", **QUICK)
    victim.identity()
    assert short.send(payload) == payload["jid"]
    wait_until(lambda: lines(out, "started") == Counter(["w"]), timeout=45, message="the job started")
    node = next(n for n in redis_cluster.nodes if n.port == home_master)
    assert node.proc is not None
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        Path(f"{out}.w.go").touch()
        wait_until(lambda: lines(out, "ran") == Counter(["w"]), timeout=15, message="the job done")
        wait_until(lambda: _release_failed(victim), timeout=5, message="its release failed and kept")
        victim.kill()
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    assert cluster.get(key) == payload["jid"]  # not freed by anyone: the job's still
    assert uj.gated.perform_async(out, "w") is None
    rescuer = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: cluster.exists(key) == 0, timeout=60, message="released by a rerun, or its TTL over")
    runs = lines(out, "ran")["w"]
    assert runs in (1, 2)  # a second run only if its ack was lost with the worker
    assert uj.gated.perform_async(out, "w") is not None  # free again: a new copy goes, and runs
    wait_until(lambda: lines(out, "ran")["w"] == runs + 1, timeout=30, message="the new copy run")
    assert rescuer.stop() == 0
    redis_cluster.wait_ok()


def _tag(p: shards.Partition) -> bytes:
    return f"{p.queue}#{p.index}".encode()


def _release_failed(worker: Worker) -> bool:
    """The worker logged a lock release Redis didn't take (store/outage.py: the first of an outage)."""
    failures = worker.events_named("redis_command_failed") + worker.events_named("redis_outage_started")
    return any(e.get("component") == "Lock release" for e in failures)
