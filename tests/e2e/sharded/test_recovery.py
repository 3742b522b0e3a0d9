"""Orphan recovery, the supervisor's requeue and a clean stop's requeue in the sharded layout, on a real
3-master cluster (worker/recovering/sharded_recovery.py): a process's in-progress lists, one per queue
partition, each go back to their own partition's queue, with that partition's keys only.

The lists are seeded directly (as a fetch leaves them: the newest at the head) and the recovery run
in-process; tests/e2e/sharded/test_recovery_worker.py kills real workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.store import keys, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.recovering.requeue_result import PartitionsUnreachable, RequeueResult
from tests.e2e.sharded.down_partition import OneMasterDown
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until

DEAD_OWNER = "host:1:dead"
QUEUE = "alpha"


def job(jid: str, queue: str = QUEUE, **extra: object) -> str:
    return codec.dumps({"class": "cluster_jobs.note", "args": [], "jid": jid, "queue": queue, **extra})


@pytest.fixture
def recovery(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Recovery]:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", f"{QUEUE}=3")
    monkeypatch.setenv("COGWORKER_QUEUES", QUEUE)
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    ctx = RedisContext.build(loaded)
    clients = ShardClients(loaded, home=ctx.client)
    shards.record_partitions(ctx.client, QUEUE)
    yield Recovery(ctx, "host:2:live", clients)
    clients.close()
    ctx.client.close()
    one_slot()


def part(index: int, queue: str = QUEUE) -> shards.Partition:
    return shards.Partition(queue, index)


def seed(
    cluster: redis.RedisCluster, partition: shards.Partition, *raws: str, owner: str = DEAD_OWNER
) -> None:
    for raw in raws:
        cluster.lpush(shards.in_progress(partition, owner), raw)
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, owner)


def queued(cluster: redis.RedisCluster, partition: shards.Partition) -> list[str]:
    return [str(raw) for raw in cluster.lrange(shards.queue_key(partition), 0, -1)]


def test_a_dead_owners_jobs_go_back_to_their_own_partitions(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    seed(cluster, part(0), job("a0"), job("b0"))
    seed(cluster, part(2), job("c2"))
    assert recovery.recover_orphans() == 3
    # The oldest (pushed first onto the list's head) is popped first, as in the one-slot layout.
    assert queued(cluster, part(0)) == [job("b0"), job("a0")]
    assert queued(cluster, part(1)) == []
    assert queued(cluster, part(2)) == [job("c2")]
    # Counted in each job's own partition, and the identity forgotten once every list is empty.
    assert cluster.get(shards.orphanings(part(0), "a0")) == "1"
    assert cluster.get(shards.orphanings(part(2), "c2")) == "1"
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 0
    for index in range(3):
        assert cluster.llen(shards.in_progress(part(index), DEAD_OWNER)) == 0


def test_a_live_owner_keeps_every_partitions_list(recovery: Recovery, cluster: redis.RedisCluster) -> None:
    seed(cluster, part(1), job("x"))
    cluster.hset(keys.process(DEAD_OWNER), "beat", 1)
    assert recovery.recover_orphans() == 0
    assert cluster.llen(shards.in_progress(part(1), DEAD_OWNER)) == 1
    cluster.delete(keys.process(DEAD_OWNER))
    cluster.hset(keys.LAST_BEAT, DEAD_OWNER, int(cluster.time()[0]))  # beat just now, presence expired
    assert recovery.recover_orphans() == 0
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 1


def test_a_requeue_sent_again_after_a_lost_reply_moves_nothing_more(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    seed(cluster, part(0), job("a"))
    seed(cluster, part(1), job("b"))
    first = recovery.requeue_dead(DEAD_OWNER)
    # The supervisor's retry after a reply it never read: the lists are empty, nothing moves twice.
    second = recovery.requeue_dead(DEAD_OWNER)
    assert (first.moved, second.moved) == (2, 0)
    assert queued(cluster, part(0)) == [job("a")]
    assert queued(cluster, part(1)) == [job("b")]
    assert cluster.get(shards.orphanings(part(0), "a")) == "1"


def test_a_payload_naming_another_queue_goes_back_to_the_partition_it_was_taken_from(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    stray = job("odd", queue="elsewhere")
    unreadable = "not json"
    seed(cluster, part(2), stray, unreadable)
    recovery.recover_orphans()
    assert sorted(queued(cluster, part(2))) == sorted([stray, unreadable])
    assert cluster.exists(shards.queue_key(shards.Partition("elsewhere", 0))) == 0


def test_a_job_alone_in_its_partition_but_not_in_its_process_is_not_convicted(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    pill, beside = job("pill"), job("beside")
    limit = recovery._settings.max_orphanings
    cluster.set(shards.orphanings(part(0), "pill"), limit)
    seed(cluster, part(0), pill)
    seed(cluster, part(1), beside)
    recovery.requeue_dead(DEAD_OWNER)
    # It shared the death with a job in another partition: counted, sent to run alone, not buried.
    assert cluster.zcard(shards.dead(part(0))) == 0
    assert [str(r) for r in cluster.lrange(shards.suspects(part(0)), 0, -1)] == [pill]
    # Alone across every partition now: the death is its own, past the limit.
    seed(cluster, part(0), pill)
    result = recovery.requeue_dead(DEAD_OWNER)
    assert result.buried == [pill]
    dead = cluster.zrange(shards.dead(part(0)), 0, -1)
    assert len(dead) == 1 and codec.loads_dict(dead[0])["error_class"] == "cogworker.ProcessDied"
    assert cluster.get(shards.stat(part(0), "failed")) == "1"
    assert cluster.exists(shards.orphanings(part(0), "pill")) == 0


def test_a_stray_periodic_or_batch_payload_is_requeued_like_any_job(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    periodic = job("p1", periodic_name="nightly", periodic_until_executed=True)
    member = job("m1", bid="batch-1")
    seed(cluster, part(1), periodic, member)
    assert recovery.requeue_dead(DEAD_OWNER).moved == 2
    assert sorted(queued(cluster, part(1))) == sorted([periodic, member])
    # The home slot's running lock and batch are not touched (those features are refused at push).
    assert cluster.exists(keys.periodic_running("nightly"), keys.batch("batch-1")) == 0


def test_a_boot_scan_finds_lists_no_registry_names(recovery: Recovery, cluster: redis.RedisCluster) -> None:
    # A list in a partition of a queue the registry doesn't name, of an identity not registered.
    hidden = shards.Partition("hidden", 0)
    cluster.lpush(shards.in_progress(hidden, DEAD_OWNER), job("h", queue="hidden"))
    assert recovery.recover_orphans() == 0
    assert recovery.recover_orphans(scan=True) == 1
    assert queued(cluster, hidden) == [job("h", queue="hidden")]
    assert cluster.sismember(keys.QUEUES, "hidden") == 1  # no live process reads it: registered, warned


def test_a_clean_stop_requeues_its_own_lists_without_counting(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    seed(cluster, part(0), job("s0"), owner="host:2:live")
    seed(cluster, part(2), job("s2"), owner="host:2:live")
    result = recovery.requeue("host:2:live", if_dead_for=None, count_orphans=False)
    assert (result.moved, result.failed) == (2, 0)
    assert cluster.exists(shards.orphanings(part(0), "s0"), shards.orphanings(part(2), "s2")) == 0


def test_a_partition_whose_master_is_down_is_requeued_once_it_answers_and_the_others_at_once(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    """The requeue never ran in one partition (its master refused the connection): the others are
    requeued, the identity stays registered, and the next check moves the rest."""
    ctx = RedisContext(
        recovery._client, recovery._scripts, recovery._settings, recovery._outages, recovery._locks
    )
    down = OneMasterDown(recovery._settings, recovery._client, part(1))
    blocked = Recovery(ctx, "host:2:live", down)
    seed(cluster, part(0), job("a"))
    seed(cluster, part(1), job("b"))
    with pytest.raises(PartitionsUnreachable, match="alpha#1") as raised:
        blocked.requeue_dead(DEAD_OWNER)
    assert raised.value.result.moved == 1
    assert queued(cluster, part(0)) == [job("a")]
    assert cluster.llen(shards.in_progress(part(1), DEAD_OWNER)) == 1
    assert blocked.recover_orphans() == 0  # reported, not raised: the check goes on for other owners
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 1
    down.close()
    assert recovery.recover_orphans() == 1  # its master answers again
    assert queued(cluster, part(1)) == [job("b")]
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 0


def test_a_dead_owners_list_on_a_master_that_failed_over_is_recovered_on_the_new_one(
    recovery: Recovery, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    seed(cluster, part(0), job("warm"))
    assert recovery.recover_orphans() == 1  # every partition's client pinned to its master now
    seed(cluster, part(1), job("moved"))
    redis_cluster.failover(key_slot(b"alpha#1"))
    seed(cluster, part(0), job("stays"))
    moved: list[int] = []

    def recovered() -> bool:
        moved.append(recovery.recover_orphans())  # MOVED at first: reported, then the new master
        return not cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER)

    wait_until(recovered, timeout=30, message="the list on the promoted replica requeued")
    assert sum(moved) == 2
    assert queued(cluster, part(1)) == [job("moved")]
    assert queued(cluster, part(0)) == [job("warm"), job("stays")]  # each requeue at the popped end


def test_a_death_seen_in_part_because_a_master_was_down_convicts_nobody(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    """The owner died holding a job in each of two partitions, one of them on a master that was down:
    the job requeued later, alone by then on the owner's lists, still shared the death."""
    ctx = RedisContext(
        recovery._client, recovery._scripts, recovery._settings, recovery._outages, recovery._locks
    )
    down = OneMasterDown(recovery._settings, recovery._client, part(1))
    recoverer = Recovery(ctx, "host:2:live", down)
    pill = job("pill")
    cluster.set(shards.orphanings(part(1), "pill"), recovery._settings.max_orphanings)
    seed(cluster, part(0), job("beside"))
    seed(cluster, part(1), pill)
    with pytest.raises(PartitionsUnreachable):
        recoverer.requeue_dead(DEAD_OWNER)
    down.answer_again()
    assert recoverer.requeue_dead(DEAD_OWNER).buried == []
    assert cluster.zcard(shards.dead(part(1))) == 0
    assert [str(r) for r in cluster.lrange(shards.suspects(part(1)), 0, -1)] == [pill]
    down.close()


def _recoverer(recovery: Recovery, clients: ShardClients) -> Recovery:
    """Another recoverer on the same home client, with `clients` for the partitions."""
    ctx = RedisContext(
        recovery._client, recovery._scripts, recovery._settings, recovery._outages, recovery._locks
    )
    return Recovery(ctx, "host:2:live", clients)


class _DownAfterRead(OneMasterDown):
    """A master that answered the read of the owner's list, then went down before its requeue (a real
    refused connect from the second use of its client on)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.down_partition, self.uses = self._down, 0
        self.answer_again()

    def of(self, partition: shards.Partition) -> redis.Redis:
        if partition == self.down_partition:
            self.uses += 1
            if self.uses > 1:
                return self._nowhere
        return super().of(partition)


def test_a_list_of_the_wrong_type_in_one_partition_is_reported_and_the_others_requeued(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    seed(cluster, part(0), job("a"))
    cluster.set(shards.in_progress(part(1), DEAD_OWNER), "not a list")
    with pytest.raises(PartitionsUnreachable, match="alpha#1"):
        recovery.requeue_dead(DEAD_OWNER)
    assert queued(cluster, part(0)) == [job("a")]
    # The key guards are asked, in the home slot, to move the key aside; the owner stays registered.
    assert cluster.smembers(keys.GUARD_REQUESTS) == {shards.in_progress(part(1), DEAD_OWNER)}
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 1


def test_an_owner_beating_again_mid_requeue_keeps_its_other_lists(
    recovery: Recovery, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(cluster, part(0), job("a"))
    seed(cluster, part(2), job("c"))
    real = recovery.requeue_list

    def then_beat(*args: object, **kwargs: object) -> RequeueResult:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        cluster.hset(keys.process(DEAD_OWNER), "beat", 1)  # the owner's heartbeat lands just then
        return result

    monkeypatch.setattr(recovery, "requeue_list", then_beat)
    recovery.recover_orphans()  # alive in the end: counted as no orphan recovery
    # One partition went back before the owner was seen alive; the other list is left to it.
    assert len(queued(cluster, part(0))) + len(queued(cluster, part(2))) == 1
    lists = [cluster.llen(shards.in_progress(part(i), DEAD_OWNER)) for i in (0, 2)]
    assert sorted(lists) == [0, 1]
    assert cluster.sismember(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER) == 1


def test_a_master_going_down_between_the_read_and_the_requeue_leaves_that_list_for_later(
    recovery: Recovery, cluster: redis.RedisCluster
) -> None:
    seed(cluster, part(0), job("a"))
    seed(cluster, part(1), job("b"))
    down = _DownAfterRead(recovery._settings, recovery._client, part(1))
    with pytest.raises(PartitionsUnreachable, match="alpha#1") as raised:
        _recoverer(recovery, down).requeue_dead(DEAD_OWNER)
    assert raised.value.result.moved == 1
    assert queued(cluster, part(0)) == [job("a")]
    assert cluster.llen(shards.in_progress(part(1), DEAD_OWNER)) == 1
    # Not empty as far as anyone can tell while that master is down: the identity is kept.
    assert _recoverer(recovery, down).sharded is not None
    assert _recoverer(recovery, down).sharded.all_empty(DEAD_OWNER) is False  # type: ignore[union-attr]
    down.close()
    assert recovery.requeue_dead(DEAD_OWNER).moved == 1
    assert queued(cluster, part(1)) == [job("b")]
