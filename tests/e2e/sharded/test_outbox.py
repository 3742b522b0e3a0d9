"""The outbox (store/outbox.py) on a real 3-master cluster: an entry written in one partition's slot is
applied in the home slot, pushes its jobs to their partitions once however often it is moved (a mover
killed before its HDEL, a reply lost after the push ran), is left for a sweep while young, and is
moved by a sweep once its lease lapsed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
import structlog

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.store import fanout, keys, outbox, shards
from cogworker.store.lazy_client import LazyClient
from cogworker.store.outage import Outages
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.loops.outbox_sweep import OutboxSweep
from cogworker.worker.recovering.partitions import Known
from tests.e2e.sharded.pushing import queued
from tests.e2e.sharded.sets_support import one_slot

QUEUE = "outq"


def applied_key() -> str:
    return keys.PREFIX + "test-applied"


def record_apply(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """The test kind's apply step: idempotent, as every kind's must be (a set add of the entry's id),
    with a count of the calls beside it (how often it ran, not what it changed)."""
    pipe = mover.home.pipeline(transaction=False)
    pipe.sadd(applied_key(), entry.id)
    pipe.incr(applied_key() + ":calls")
    pipe.execute()


@dataclass
class Rig:
    mover: outbox.Mover
    home: redis.Redis


@pytest.fixture
def rig(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", f"{QUEUE}=3")
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    lazy = LazyClient(loaded)
    outbox.register("test", f"{__name__}:record_apply")
    yield Rig(outbox.Mover(fanout.clients_of(lazy.client), loaded), lazy.client)
    outbox.KINDS.pop("test", None)
    fanout.release(lazy.client)
    lazy.close()
    one_slot()


def job(jid: str, index: int) -> tuple[shards.Partition, str]:
    body = {"class": "app.Job", "queue": QUEUE, "jid": jid, "args": []}
    return shards.Partition(QUEUE, index), codec.dumps(body)


def write(cluster: redis.RedisCluster, where: shards.Partition, entry_id: str, age_s: float = 0.0) -> None:
    """An entry as a script writes it with a move, in `where`'s slot, written `age_s` ago."""
    raw = outbox.encode("test", [job("j-a", 0), job("j-b", 2)], note="x")
    if age_s:
        body = codec.loads(raw)
        body["at"] -= age_s
        raw = codec.dumps(body)
    cluster.hset(outbox.key(where), entry_id, raw)


def everything_queued(cluster: redis.RedisCluster) -> list[str]:
    return sorted(jid for i in range(3) for jid in queued(cluster, shards.Partition(QUEUE, i)))


def test_an_entry_is_applied_pushed_and_removed(rig: Rig, cluster: redis.RedisCluster) -> None:
    where = shards.Partition("elsewhere", 0)
    write(cluster, where, "e1")
    assert rig.mover.move_ids(where, ["e1", "gone"]) == 1
    assert queued(cluster, shards.Partition(QUEUE, 0)) == ["j-a"]
    assert queued(cluster, shards.Partition(QUEUE, 2)) == ["j-b"]
    assert cluster.smembers(applied_key()) == {"e1"} and not cluster.exists(outbox.key(where))
    # Readers cover the partitions pushed to (2 is above no configured count here: 3 was).
    assert int(cluster.hget(shards.partitions_key(), QUEUE) or 0) == 3


def test_a_second_move_after_a_mover_died_before_its_hdel_pushes_nothing_again(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    where = shards.Partition("elsewhere", 1)
    write(cluster, where, "e2")
    raw = cluster.hget(outbox.key(where), "e2")
    entry = outbox.decode("e2", raw)
    # The first mover applied and pushed, and was killed before its HDEL (or lost the push's reply).
    record_apply(rig.mover, entry)
    rig.mover.push(entry)
    assert everything_queued(cluster) == ["j-a", "j-b"]
    # Another mover (a sweep) carries the entry out again: the same effects, once.
    assert rig.mover.move(where, outbox.decode("e2", raw))
    assert everything_queued(cluster) == ["j-a", "j-b"]
    assert cluster.smembers(applied_key()) == {"e2"} and int(cluster.get(applied_key() + ":calls") or 0) == 2
    assert not cluster.hexists(outbox.key(where), "e2")


def test_an_entry_whose_push_never_ran_is_pushed_by_the_sweep_once_its_lease_lapsed(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    where = shards.Partition("elsewhere", 2)
    write(cluster, where, "young")
    write(cluster, None, "old", age_s=outbox.OUTBOX_LEASE_S + 1)  # the home slot's outbox
    assert rig.mover.sweep(where) == 0 and rig.mover.sweep(None) == 1
    assert everything_queued(cluster) == ["j-a", "j-b"] and not cluster.exists(outbox.key(None))
    assert cluster.hexists(outbox.key(where), "young")
    assert rig.mover.sweep(where, now=time.time() + outbox.OUTBOX_LEASE_S + 1) == 1
    assert everything_queued(cluster) == ["j-a", "j-b"]  # the same jobs: their markers held
    assert not cluster.exists(outbox.key(where))


def test_an_unknown_kind_or_an_unreadable_entry_is_left_for_a_process_that_knows_it(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    where = shards.Partition("elsewhere", 0)
    stale = time.time() - outbox.OUTBOX_LEASE_S - 1
    cluster.hset(outbox.key(where), "new", codec.dumps({"kind": "from-a-newer-version", "at": stale}))
    cluster.hset(outbox.key(where), "junk", "not json")
    with structlog.testing.capture_logs() as logs:
        assert rig.mover.sweep(where) == 0
    assert cluster.hlen(outbox.key(where)) == 2
    assert {e["event"] for e in logs} >= {"outbox_kind_unknown", "outbox_entry_unreadable"}


def test_an_entry_older_than_its_markers_is_still_moved_and_said_to_be_stale(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    write(cluster, None, "ancient", age_s=outbox.OUTBOX_MARK_TTL_S + 5)
    with structlog.testing.capture_logs() as logs:
        assert rig.mover.sweep(None) == 1
    assert [e["entry"] for e in logs if e["event"] == "outbox_entry_stale"] == ["ancient"]
    assert everything_queued(cluster) == ["j-a", "j-b"]


def test_a_poll_sweeps_the_home_outbox_and_every_non_empty_partitions(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    """The poller's sweep (worker/loops/outbox_sweep.py): lengths read per master, then only the
    outboxes holding entries scanned; a young entry stays, lapsed ones are moved wherever they are."""
    parts = [shards.Partition(QUEUE, i) for i in range(3)]
    write(cluster, parts[0], "p0", age_s=outbox.OUTBOX_LEASE_S + 1)
    write(cluster, parts[2], "p2-young")
    write(cluster, None, "home", age_s=outbox.OUTBOX_LEASE_S + 1)
    sweep = OutboxSweep(rig.mover, Known(rig.home, [QUEUE]), Outages(), None)
    assert sweep.sweep() == 2
    assert cluster.smembers(applied_key()) == {"p0", "home"}
    assert [cluster.hlen(outbox.key(p)) for p in parts] == [0, 0, 1] and not cluster.exists(outbox.key(None))


def test_a_sweep_goes_past_a_partition_it_cant_read_and_one_whose_master_is_down(
    rig: Rig, cluster: redis.RedisCluster
) -> None:
    """One partition's outbox of the wrong type (its length can't be read, nor can it be scanned): the
    lengths are asked partition by partition, the bad one reported by its name, the others swept. A
    partition the fetcher knows to be down is not asked at all."""
    parts = [shards.Partition(QUEUE, i) for i in range(3)]
    cluster.rpush(outbox.key(parts[1]), "not a hash")
    write(cluster, parts[0], "p0", age_s=outbox.OUTBOX_LEASE_S + 1)
    write(cluster, parts[2], "p2", age_s=outbox.OUTBOX_LEASE_S + 1)
    # The fetcher's health, told of a failure; its probe (which would find the master answering) waits
    # a minute, longer than this test.
    health = PartitionHealth(rig.mover.clients, probe_s=60)  # type: ignore[arg-type]  # only `of` is used
    health.failed(parts[2], redis.ConnectionError("stopped"))
    try:
        sweep = OutboxSweep(rig.mover, Known(rig.home, [QUEUE]), Outages(), health)
        with structlog.testing.capture_logs() as logs:
            assert sweep.sweep() == 1
    finally:
        health.close()
    assert cluster.smembers(applied_key()) == {"p0"} and cluster.hexists(outbox.key(parts[2]), "p2")
    failed = [e["component"] for e in logs if e["event"] == "redis_command_failed"]
    assert failed == [f"Outbox {parts[1]}"]
