"""A live process's reconcile in the sharded layout, on a real 3-master cluster
(worker/recovering/partition_lists.py, reconcile.py): an entry on one of its partition lists that it
doesn't hold (a fetch whose reply was lost) goes back to that partition's queue; held entries stay;
a job requeued by recovery while the process was declared dead is disowned, whichever partition it was in.

The lists are seeded directly, as a fetch whose reply was lost leaves them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.store import shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.recovering.partition_lists import PartitionLists
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.recovering.requeue_result import PartitionsUnreachable
from cogworker.worker.settling.settle import Settler
from tests.e2e.sharded.down_partition import OneMasterDown
from tests.e2e.sharded.sets_support import one_slot

ME = "host:7:live"
QUEUE = "alpha"


def job(jid: str) -> str:
    return codec.dumps({"class": "cluster_jobs.note", "args": [], "jid": jid, "queue": QUEUE})


def part(index: int) -> shards.Partition:
    return shards.Partition(QUEUE, index)


@dataclass
class Parts:
    ctx: RedisContext
    reconciler: Reconciler
    settler: Settler
    lists: PartitionLists
    fetcher: ReliableFetch


@pytest.fixture
def parts(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Parts]:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", f"{QUEUE}=3")
    monkeypatch.setenv("COGWORKER_QUEUES", QUEUE)
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    ctx = RedisContext.build(loaded)
    clients = ShardClients(loaded, home=ctx.client)
    shards.record_partitions(ctx.client, QUEUE)
    recovery = Recovery(ctx, ME, clients)
    settler = Settler(ctx, shards.in_progress(part(0), ME))
    reconciler = Reconciler(ctx, settler)
    lists = PartitionLists(clients, ME, [QUEUE], on_buried=recovery.complete_burials)
    reconciler.partition_lists = lists
    # Not used in the sharded layout (the partition lists are reconciled instead); the signature wants one.
    fetcher = ReliableFetch(ctx.client, ctx.client, ctx.scripts, ME, loaded.queue_spec)
    yield Parts(ctx, reconciler, settler, lists, fetcher)
    clients.close()
    ctx.client.close()
    one_slot()


def on_list(cluster: redis.RedisCluster, partition: shards.Partition, *raws: str) -> None:
    for raw in raws:
        cluster.lpush(shards.in_progress(partition, ME), raw)


def listed(cluster: redis.RedisCluster, key: str) -> list[str]:
    return [str(raw) for raw in cluster.lrange(key, 0, -1)]


def test_entries_not_held_go_back_to_their_own_partition(parts: Parts, cluster: redis.RedisCluster) -> None:
    held, lost0, lost2 = job("held"), job("lost0"), job("lost2")
    on_list(cluster, part(0), held, lost0)
    on_list(cluster, part(2), lost2)
    parts.reconciler.hold([Work(QUEUE, held)])
    parts.reconciler.lost_reply()
    parts.reconciler.run_if_due(parts.fetcher)
    assert listed(cluster, shards.queue_key(part(0))) == [lost0]
    assert listed(cluster, shards.queue_key(part(2))) == [lost2]
    assert listed(cluster, shards.in_progress(part(0), ME)) == [held]
    assert cluster.llen(shards.in_progress(part(2), ME)) == 0
    # Sent again (its reply lost): nothing more moves, the held entry stays.
    again = parts.lists.reconcile([held], [], 3)
    assert (again.requeued, again.kept) == (0, 0)
    assert cluster.llen(shards.queue_key(part(0))) == 1
    assert listed(cluster, shards.in_progress(part(0), ME)) == [held]


def test_a_failed_job_thread_counts_an_orphaning_in_its_partition(
    parts: Parts, cluster: redis.RedisCluster
) -> None:
    failing = job("failing")
    on_list(cluster, part(1), failing)
    parts.reconciler.hold([Work(QUEUE, failing)])
    parts.reconciler.thread_failed(failing)
    parts.reconciler.run_if_due(parts.fetcher)
    assert listed(cluster, shards.queue_key(part(1))) == [failing]
    assert cluster.get(shards.orphanings(part(1), "failing")) == "1"


def test_a_thread_failing_past_the_limit_is_filed_in_its_partitions_dead(
    parts: Parts, cluster: redis.RedisCluster
) -> None:
    pill = job("pill")
    cluster.set(shards.orphanings(part(2), "pill"), 3)
    on_list(cluster, part(2), pill)
    result = parts.lists.reconcile([], [pill], 3)
    assert result.buried == [pill]
    dead = cluster.zrange(shards.dead(part(2)), 0, -1)
    assert len(dead) == 1 and codec.loads_dict(dead[0])["error_class"] == "cogworker.ProcessDied"


def test_held_jobs_requeued_while_declared_dead_are_disowned_in_any_partition(
    parts: Parts, cluster: redis.RedisCluster
) -> None:
    kept, taken = job("kept"), job("taken")
    on_list(cluster, part(0), kept)  # still ours
    parts.reconciler.hold([Work(QUEUE, kept), Work(QUEUE, taken)])  # `taken` was in partition 2's list,
    # requeued by another process's recovery while this one was silent
    parts.reconciler.lost_reply()
    parts.reconciler.run_if_due(parts.fetcher)
    assert parts.settler.disowned == 1
    assert parts.lists.contents() == {kept: 1}


def test_a_partition_whose_master_is_down_is_reconciled_once_it_answers(
    parts: Parts, cluster: redis.RedisCluster
) -> None:
    """Its reconcile never ran (the connection refused): the other partitions are reconciled, the
    reconciler reports it and tries again, and then that partition's lost entry goes back too."""
    lost0, lost1 = job("lost0"), job("lost1")
    on_list(cluster, part(0), lost0)
    on_list(cluster, part(1), lost1)
    down = OneMasterDown(parts.ctx.settings, parts.ctx.client, part(1))
    parts.reconciler.partition_lists = PartitionLists(down, ME, [QUEUE])
    parts.reconciler.lost_reply()
    parts.reconciler.run_if_due(parts.fetcher)
    assert listed(cluster, shards.queue_key(part(0))) == [lost0]
    assert listed(cluster, shards.in_progress(part(1), ME)) == [lost1]
    assert "Reconcile" in parts.ctx.outages._since  # reported; tried again at the next fetch round
    down.close()
    parts.reconciler.partition_lists = parts.lists  # its master answers again
    parts.reconciler.lost_reply()
    parts.reconciler.run_if_due(parts.fetcher)
    assert listed(cluster, shards.queue_key(part(1))) == [lost1]
    assert cluster.llen(shards.in_progress(part(1), ME)) == 0
    assert "Reconcile" not in parts.ctx.outages._since


def test_a_partition_the_fetcher_knows_is_down_is_not_waited_on(
    parts: Parts, cluster: redis.RedisCluster
) -> None:
    """The reconcile runs on the fetcher thread: a partition its health marks down is skipped at once
    (no connect to wait for), the others reconciled, and the look for requeued jobs is not made on a
    partial read."""
    lost0 = job("lost0")
    on_list(cluster, part(0), lost0)
    down = OneMasterDown(parts.ctx.settings, parts.ctx.client, part(1))
    health = PartitionHealth(down)
    health.failed(part(1), redis.ConnectionError("refused"))
    lists = PartitionLists(down, ME, [QUEUE], health=health)
    try:
        with pytest.raises(PartitionsUnreachable, match="alpha#1"):
            lists.reconcile([], [], 3)
        assert listed(cluster, shards.queue_key(part(0))) == [lost0]
        with pytest.raises(PartitionsUnreachable, match="alpha#1"):
            lists.contents()
    finally:
        health.close()
        down.close()
