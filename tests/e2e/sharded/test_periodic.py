"""Periodic jobs in the sharded layout, with real workers on a real 3-master cluster: each slot's claim
in the home slot writes a home-outbox entry with the job (store/lua/periodic.lua), which the ticker
moves to the job's queue partition (api/periodic_outbox.py). A new user's entry in a fresh interpreter;
two workers racing push each slot once; a worker SIGKILLed between the claim and the push leaves the
entry, which another worker's sweep pushes once; two deployments' prefixes on one cluster each run
their own entry."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.store import keys, shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.periodic_support import (
    NAME,
    claimed_jid,
    queued_anywhere,
    queues_off_home,
    runs,
    slot_counts,
    start,
)
from tests.e2e.sharded.pushing import every_key, master_of
from tests.e2e.sharded.sets_support import one_slot
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool


@pytest.fixture
def layout(env: dict[str, str]) -> Iterator[None]:
    """This (the test's) process names keys as the deployment does; the one-slot layout after."""
    shards.use_settings(settings_module.load_settings())
    yield
    one_slot()


def test_a_first_call_registers_an_entry_and_two_racing_workers_push_each_slot_once(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    queue, _ = queues_off_home(redis_cluster)
    code = """
        import cogworker
        from cogworker.api.periodic import entries

        @cogworker.job(queue="first", name="first.probe")
        def probe() -> None: ...

        print("PUSHED", bool(probe.perform_async()))  # binds the sharded layout in this interpreter
        cogworker.periodic("* * * * * *", name="first-call")(probe)
        import sharded_periodic
        print("ENTRIES", *sorted(e.name for e in entries()))
    """
    env = sharded_env(redis_cluster, COGWORKER_REQUIRE="sharded_periodic", SHARDED_PERIODIC_QUEUE=queue)
    printed = first_call(code, env.pop("COGWORKER_REDIS_URL"), **env).splitlines()
    assert printed == ["PUSHED True", f"ENTRIES first-call {NAME}"]

    spread = {"COGWORKER_QUEUE_PARTITIONS": f"{queue}=2"}
    racers = [start(workers, redis_cluster, out, queue, queue, **spread) for _ in range(2)]
    wait_until(lambda: len(slot_counts(out)) >= 6, timeout=60, message="six slots run")
    assert [w.stop() for w in racers] == [0, 0]

    done = runs(out)
    assert all(n == 1 for n in slot_counts(out).values()), slot_counts(out)
    # Each run is the job its slot's claim pushed (its jid pre-assigned with the outbox entry).
    assert all(claimed_jid(cluster, NAME, run.slot) == run.jid for run in done)
    history = [codec.loads(raw) for raw in cluster.lrange(keys.periodic_runs(NAME), 0, -1)]
    enqueued = {str(r["jid"]) for r in history if r["outcome"] == "enqueued"}
    assert len(enqueued) == len({r["slot"] for r in history if r["outcome"] == "enqueued"})
    # Every slot enqueued ran or still waits in its partition: none lost, none in the outbox.
    assert enqueued <= {run.jid for run in done} | queued_anywhere(cluster, queue, 2)
    assert cluster.hlen(keys.OUTBOX) == 0


def test_a_worker_killed_between_the_claim_and_the_push_leaves_the_slot_to_another_workers_sweep(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    queue, other = queues_off_home(redis_cluster)
    node = next(n for n in redis_cluster.nodes if n.port == master_of(redis_cluster, shards.Partition(queue)))
    assert node.proc is not None
    # The first worker reads another queue (on a live master), so nothing of its own waits on the
    # stopped one but the push of its entry's job.
    first = start(workers, redis_cluster, out, other, queue)
    wait_until(lambda: cluster.llen(keys.periodic_runs(NAME)) >= 1, timeout=60, message="a slot claimed")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        # Its ticker claims the next slot (home slot) and blocks pushing the job to the stopped master.
        left = wait_until(lambda: cluster.hkeys(keys.OUTBOX), timeout=10, message="an entry written")
        first.kill()
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    [entry_id] = left
    slot = int(entry_id.rsplit(":", 1)[1])
    assert entry_id == f"periodic:{NAME}:{slot}" and claimed_jid(cluster, NAME, slot)
    redis_cluster.wait_ok()

    second = start(workers, redis_cluster, out, queue, queue)
    wait_until(lambda: slot in slot_counts(out), timeout=60, message="the killed worker's slot run")
    wait_until(lambda: len(slot_counts(out)) >= 4, timeout=60, message="more slots run")
    # Nothing stays in the outbox while a worker runs: a move that failed (a MOVED after the stopped
    # master's failover) is made again at the ticker's next check or by the sweep. Asked before the
    # stop: a stop may come between a claim and its move, which the next worker's sweep then makes.
    wait_until(lambda: cluster.hlen(keys.OUTBOX) == 0, timeout=30, message="the outbox emptied")
    assert second.stop() == 0
    counts = slot_counts(out)
    assert counts[slot] == 1 and all(n == 1 for n in counts.values()), counts
    assert [run.pid for run in runs(out) if run.slot == slot] == [second.pid]
    assert all(claimed_jid(cluster, NAME, run.slot) == run.jid for run in runs(out))


def test_two_deployments_on_one_cluster_each_run_their_own_entry(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    queue, _ = queues_off_home(redis_cluster)
    a = start(workers, redis_cluster, out, queue, queue, SHARDED_PERIODIC_NAME="entry-a")
    b = start(
        workers,
        redis_cluster,
        out,
        queue,
        queue,
        SHARDED_PERIODIC_NAME="entry-b",
        COGWORKER_KEY_PREFIX="other:",
    )
    wait_until(
        lambda: min(len(slot_counts(out, "entry-a")), len(slot_counts(out, "entry-b"))) >= 3,
        timeout=60,
        message="both entries run",
    )
    assert [a.stop(), b.stop()] == [0, 0]
    by_entry = Counter((run.entry, run.pid) for run in runs(out))
    assert set(by_entry) == {("entry-a", a.pid), ("entry-b", b.pid)}
    for entry in ("entry-a", "entry-b"):
        assert all(n == 1 for n in slot_counts(out, entry).values())
    # Each deployment's entry, claims and outbox live under its own prefix only.
    assert set(cluster.hkeys(keys.PERIODIC_ENTRIES)) == {"entry-a"}
    assert set(cluster.hkeys("other:{home}:periodic:entries")) == {"entry-b"}
    left = every_key(redis_cluster)
    assert [k for k in left if not k.startswith(("cw:", "other:"))] == []
    assert not [k for k in left if k.startswith("cw:") and "entry-b" in k]
    assert not [k for k in left if k.startswith("other:") and "entry-a" in k]


def test_an_until_executed_entrys_running_lock_is_taken_with_the_claim_and_released_by_the_run(
    layout: None, redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, out: Path
) -> None:
    queue, _ = queues_off_home(redis_cluster)
    worker = start(workers, redis_cluster, out, queue, queue, SHARDED_PERIODIC_UNTIL_EXECUTED="1")
    # Each run releases the home lock its claim took, or the next slots would be skipped for a day.
    wait_until(lambda: len(slot_counts(out)) >= 4, timeout=60, message="four slots run")
    assert worker.stop() == 0
    assert all(n == 1 for n in slot_counts(out).values()), slot_counts(out)
    history = [codec.loads(raw) for raw in cluster.lrange(keys.periodic_runs(NAME), 0, -1)]
    enqueued = {str(r["jid"]) for r in history if r["outcome"] == "enqueued"}
    ran = {run.jid for run in runs(out)}
    holder = cluster.get(keys.periodic_running(NAME))
    # Held, after the stop, only by a run enqueued and not run yet.
    assert holder is None or (holder in enqueued and holder not in ran), (holder, history)
    assert all(run.pid == worker.pid for run in runs(out))
