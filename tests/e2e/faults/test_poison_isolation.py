"""A poison pill fetched beside innocent jobs, concurrency 4: a death convicts only a job that was
alone on its process's list (worker/recovering/recovery.py). Three innocent 2-second jobs and one
pill (then two pills), under `cogworker run` and under the swarm: every pill ends in dead as
`cogworker.ProcessDied` after COGWORKER_MAX_ORPHANINGS + 1 deaths, and every innocent job runs to
its end, none in dead. Before, the innocents shared every death with the pill and were buried with
it."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import demo_jobs
import pytest
import redis

from cogworker.store import keys
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow

MAX_ORPHANINGS = 3
INNOCENTS = 3
# Short thresholds through settings, so a dead worker's list is recovered within seconds.
QUICK = {
    **QUICK_RECOVERY,
    "COGWORKER_POLL_INTERVAL_S": "0.2",
    "COGWORKER_MAX_ORPHANINGS": str(MAX_ORPHANINGS),
}


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def push(pills: int) -> list[str]:
    """The innocent jobs first, then the pills: one fetch of four takes them all together."""
    for i in range(INNOCENTS):
        demo_jobs.sleepy.perform_async(f"innocent{i}", 2.0)
    return [demo_jobs.kill_me.perform_async(f"pill{i}") for i in range(pills)]


def tags(r: redis.Redis, key: str) -> list[str]:
    return [line.split()[0] for line in r.lrange(key, 0, -1)]


def dead_entries(r: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in r.zrange(keys.DEAD, 0, -1)]


def settled(r: redis.Redis, pills: list[str]) -> bool:
    """Every innocent job finished and every pill in dead with its completed entry."""
    finished = {t for t in tags(r, "test:ran") if t.startswith("innocent")}
    buried = {e["jid"] for e in dead_entries(r) if "error_class" in e}
    return len(finished) == INNOCENTS and buried >= set(pills)


def an_innocent_buried(r: redis.Redis) -> bool:
    return any(str(e["class"]).endswith("sleepy") for e in dead_entries(r))


def assert_only_the_pills_died(r: redis.Redis, pills: list[str]) -> None:
    dead = dead_entries(r)
    assert sorted(str(e["jid"]) for e in dead) == sorted(pills), "only the pills are in dead"
    assert {e["error_class"] for e in dead} == {"cogworker.ProcessDied"}
    ran = tags(r, "test:ran")
    assert all(ran.count(f"innocent{i}") >= 1 for i in range(INNOCENTS)), ran
    started = tags(r, "test:started")
    for i in range(len(pills)):
        # Each death is counted for every job on the list; a pill may die beside the other before it
        # started, so only one pill's starts are exactly its deaths.
        if len(pills) == 1:
            assert started.count(f"pill{i}") == MAX_ORPHANINGS + 1, started
        else:
            assert 1 <= started.count(f"pill{i}") <= MAX_ORPHANINGS + 1, started
    # The innocents' counts are cleared by their acks, which a worker sends after the job's body has
    # written its tag (with its next fetch): wait for them rather than race the last one.
    wait_until(
        lambda: r.keys(keys.ORPHANINGS_PREFIX + "*") == [],
        timeout=30,
        message="the innocents' orphan counts cleared by their acks",
    )
    assert r.llen(keys.suspects("default")) == 0 and r.llen(keys.queue("default")) == 0


# Up to eight deaths, each recovered after the orphan threshold, on a loaded machine.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("pill_count", [1, 2], ids=["one-pill", "two-pills"])
def test_under_cogworker_run_only_the_pills_end_in_dead(
    r: redis.Redis, configured: object, workers: WorkerPool, pill_count: int
) -> None:
    pills = push(pill_count)
    # It reads another queue: it only requeues the dead workers' lists.
    workers.start(COGWORKER_QUEUES="other", **QUICK)
    deaths = 0
    while not settled(r, pills):
        # A pill is convicted at its (MAX_ORPHANINGS + 1)th death: no more deaths than that per pill.
        assert deaths < pill_count * (MAX_ORPHANINGS + 1), f"{deaths} workers died; dead: {dead_entries(r)}"
        worker = workers.start(COGWORKER_CONCURRENCY="4", **QUICK)
        wait_until(
            lambda w=worker: w.proc.poll() is not None or settled(r, pills),
            timeout=90,
            message="the worker to die or every job to be settled",
        )
        if worker.proc.poll() is not None:
            assert worker.proc.returncode == -signal.SIGKILL, worker.log_text()
            deaths += 1
            # The recoverer requeues what the dead worker held (or buries it: a raw entry, then its
            # completed one) before the next worker starts.
            wait_until(
                lambda: (
                    not r.keys(keys.IN_PROGRESS_PREFIX + "*")
                    and all("error_class" in e for e in dead_entries(r))
                ),
                timeout=30,
                message="the dead list recovered",
            )
    assert deaths == len([t for t in tags(r, "test:started") if t.startswith("pill")])  # a pill's run each
    assert_only_the_pills_died(r, pills)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("pill_count", [1, 2], ids=["one-pill", "two-pills"])
def test_under_the_swarm_only_the_pills_end_in_dead(
    swarms: SwarmRunner, r: redis.Redis, configured: object, pill_count: int
) -> None:
    pills = push(pill_count)
    swarm = swarms.start(COGWORKER_COUNT="1", COGWORKER_CONCURRENCY="4", **QUICK)
    wait_until(
        lambda: settled(r, pills) or an_innocent_buried(r),
        timeout=150,
        message="every pill in dead, every innocent run",
    )
    assert_only_the_pills_died(r, pills)
    # The supervisor saw each death, and the requeue it asked for put the jobs back at once.
    killed = swarm.supervisor_events("child_exited", signal="SIGKILL")
    assert len(killed) == len([t for t in tags(r, "test:started") if t.startswith("pill")])
    assert swarm.stop() == 0


def test_a_pill_without_a_jid_ends_in_dead(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    """Counted by the digest of its bytes: before, a payload without a jid was requeued uncounted, and
    killed a worker for ever."""
    pill = json.dumps({"class": "demo_jobs.kill_me", "args": ["nojid"], "kwargs": {}, "queue": "default"})
    r.lpush(keys.queue("default"), pill)
    workers.start(COGWORKER_QUEUES="other", **QUICK)
    for death in range(MAX_ORPHANINGS + 1):
        victim = workers.start(COGWORKER_CONCURRENCY="4", **QUICK)
        assert victim.proc.wait(timeout=60) == -signal.SIGKILL, victim.log_text()
        wait_until(
            lambda: not r.keys(keys.IN_PROGRESS_PREFIX + "*"), timeout=30, message=f"death {death} recovered"
        )
    [entry] = wait_until(
        lambda: [e for e in dead_entries(r) if "error_class" in e], timeout=30, message="the pill's entry"
    )
    assert entry["error_class"] == "cogworker.ProcessDied" and "jid" not in entry
    assert tags(r, "test:started") == ["nojid"] * (MAX_ORPHANINGS + 1)
    # Deleted right after the burial (a write of its own, after the swap into dead: the entry can be
    # seen first); one left by a recoverer that died in between expires with its TTL.
    wait_until(
        lambda: not r.keys(keys.ORPHANINGS_RAW_PREFIX + "*"), timeout=10, message="the pill counter deleted"
    )
    assert r.llen(keys.queue("default")) == 0 and r.llen(keys.suspects("default")) == 0
