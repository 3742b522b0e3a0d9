"""The deployment's slot changes master while a swarm runs: 3,000 jobs are pushed (by a producer
thread) and run (by a 2-child `cogworker-swarm`) while the slot's master is failed over to its replica
(CLUSTER FAILOVER) and then the slot is migrated to another master (SETSLOT + MIGRATE). Every client
gets MOVED (or ASK/TRYAGAIN mid-migration), counts Redis as briefly unavailable, finds the new owner
and carries on. Every job must run (counted in a file outside Redis); any run twice is logged."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.redis_cluster import PREFIX, SLOT, RedisCluster
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

JOBS = 3000
CHUNK = 50
# The producer stays at most this far ahead of the jobs run, so pushes go on through both changes.
AHEAD = 400


class Producer(threading.Thread):
    """Pushes JOBS jobs in chunks; a chunk whose push raised is pushed again (a MOVED push was not
    stored; one that timed out might have been, and would then run twice: counted, not hidden)."""

    def __init__(self, out: Path, ran: Callable[[], list[str]]) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.ran = ran
        self.pushed = 0
        self.failures: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        import cluster_jobs

        try:
            deadline = time.monotonic() + 60
            for start in range(0, JOBS, CHUNK):
                args = [(str(self.out), f"m{i}") for i in range(start, start + CHUNK)]
                while True:
                    try:
                        cogworker.push_bulk(cluster_jobs.note, args)
                        break
                    except Exception as exc:
                        self.failures.append(f"{type(exc).__name__}: {exc}")
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)  # a retry pace, not a synchronisation
                self.pushed = start + CHUNK
                wait_until(lambda: self.pushed - len(self.ran()) < AHEAD, timeout=60, message="the swarm")
        except BaseException as exc:
            self.error = exc


def test_a_failover_and_a_slot_migration_while_running_lose_no_job(
    redis_cluster: RedisCluster,
    cluster: redis.RedisCluster,
    swarms: SwarmRunner,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "ran.txt"
    swarm = swarms.start(**env, COGWORKER_CONCURRENCY="4", COGWORKER_POLL_INTERVAL_S="0.5")
    swarm.wait_ready(timeout=30)
    cw_client.configure(load_settings())
    first_owner, _ = redis_cluster.owner(SLOT)

    def ran() -> list[str]:
        return [line.split()[0] for line in out.read_text().splitlines()] if out.exists() else []

    producer = Producer(out, ran)
    producer.start()
    wait_until(lambda: len(ran()) >= JOBS // 4, timeout=60, message="a quarter of the jobs run")
    old, new = redis_cluster.failover(SLOT)
    wait_until(lambda: len(ran()) >= JOBS // 2, timeout=60, message=f"half the jobs run:\n{swarm.tail()}")
    source, target = redis_cluster.migrate(SLOT)
    producer.join(timeout=60)
    assert producer.error is None, producer.error
    assert producer.pushed == JOBS

    wanted = {f"m{i}" for i in range(JOBS)}
    wait_until(lambda: set(ran()) >= wanted, timeout=60, message=f"every job to run:\n{swarm.tail()}")
    counts = collections.Counter(ran())
    lost = wanted - set(counts)
    twice = sorted(tag for tag, n in counts.items() if n > 1)
    outages = swarm.events("redis_outage_started")
    with capsys.disabled():
        print(
            f"\ncluster MOVED: slot {SLOT} {first_owner} -> failover {old}->{new} -> migrate "
            f"{source}->{target}; {JOBS} jobs, lost {len(lost)}, ran twice {len(twice)} {twice[:20]}; "
            f"producer retried {len(producer.failures)} pushes {producer.failures[:3]}; "
            f"{len(outages)} outage lines in the swarm: {[o.get('error') for o in outages[:4]]}"
        )
    assert not lost
    assert first_owner != target
    # The swarm did meet the moves (its fetch loop's own connection can't be closed for it when idle).
    assert any("MOVED" in str(o.get("error")) for o in outages), outages
    # Nothing is left behind: every queue and in-progress list is empty, on the slot's new master.
    wait_until(
        lambda: cluster.llen(f"{PREFIX}queue:default") == 0 and not cluster.keys(f"{PREFIX}inprogress:*"),
        timeout=15,
        message="empty queue and in-progress lists",
    )
    # Every outage a component reported ends (an idle connection may meet its MOVED only now).
    wait_until(
        lambda: len(swarm.events("redis_outage_ended")) == len(swarm.events("redis_outage_started")),
        timeout=15,
        message="every outage to end",
    )
    assert swarm.stop() == 0
