"""The poller in the sharded layout, on a real 3-master cluster (worker/loops/partition_poller.py): each
queue partition's schedule and retry sets graduate into that partition's own queue, on time (the look
between polls), once however often it is sent, and a partition whose master doesn't answer doesn't
stop the others.

Entries are seeded directly (ZADD into `shards.schedule(p)` / `shards.retry(p)`), as a push or a
failure filing leaves them, and the poller runs in-process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.store import shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.loops import graduation, partition_poller
from cogworker.worker.loops.poller import Poller
from cogworker.worker.recovering.recovery import Recovery
from tests.e2e.sharded.down_partition import OneMasterDown
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until

QUEUE = "alpha"


def entry(jid: str, queue: str = QUEUE) -> str:
    return codec.dumps({"class": "cluster_jobs.note", "args": [], "jid": jid, "queue": queue})


def part(index: int, queue: str = QUEUE) -> shards.Partition:
    return shards.Partition(queue, index)


@dataclass
class Setup:
    settings: settings_module.Settings
    ctx: RedisContext
    clients: ShardClients

    def poller(self, clients: ShardClients | None = None, health: PartitionHealth | None = None) -> Poller:
        clients = clients or self.clients
        return Poller(
            self.ctx,
            Recovery(self.ctx, "host:9:me", clients),
            quiet=lambda: False,
            scan_at_boot=False,
            shard_clients=clients,
            shard_health=health,
        )


def setup_for(monkeypatch: pytest.MonkeyPatch, partitions: str, **extra: str) -> Setup:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", partitions)
    monkeypatch.setenv("COGWORKER_QUEUES", QUEUE)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    ctx = RedisContext.build(loaded)
    shards.record_partitions(ctx.client, QUEUE)
    return Setup(loaded, ctx, ShardClients(loaded, home=ctx.client))


@pytest.fixture
def setup(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    # A poll a minute: only the look between polls can enqueue an entry on time.
    made = setup_for(monkeypatch, f"{QUEUE}=3", COGWORKER_POLL_INTERVAL_S="60")
    yield made
    made.clients.close()
    made.ctx.client.close()
    one_slot()


def queued(cluster: redis.RedisCluster, partition: shards.Partition) -> list[dict[str, object]]:
    return [codec.loads_dict(raw) or {} for raw in cluster.lrange(shards.queue_key(partition), 0, -1)]


def test_a_scheduled_job_and_a_retry_in_different_partitions_are_enqueued_in_their_own_on_time(
    setup: Setup, cluster: redis.RedisCluster
) -> None:
    poller = setup.poller()
    poller.start()
    try:
        poller_started = time.time()
        due_at = poller_started + 1.5  # after the first poll: only a look can see it
        cluster.zadd(shards.schedule(part(1)), {entry("scheduled"): due_at})
        cluster.zadd(shards.retry(part(2)), {entry("retried"): due_at})
        cluster.zadd(shards.retry(part(0)), {entry("later"): due_at + 3_600})
        wait_until(
            lambda: (
                cluster.llen(shards.queue_key(part(1))) == 1 and cluster.llen(shards.queue_key(part(2))) == 1
            ),
            timeout=10,
            message="both due entries enqueued",
        )
    finally:
        poller.stop()
    for index, jid in ((1, "scheduled"), (2, "retried")):
        (job,) = queued(cluster, part(index))
        assert job["jid"] == jid
        assert due_at <= float(str(job["enqueued_at"])) < due_at + 1.0
    assert cluster.llen(shards.queue_key(part(0))) == 0
    assert cluster.zcard(shards.retry(part(0))) == 1  # not due: left where it is
    assert cluster.zcard(shards.schedule(part(1))) == 0 and cluster.zcard(shards.retry(part(2))) == 0


def test_a_graduation_sent_again_after_a_lost_reply_moves_nothing_more(
    setup: Setup, cluster: redis.RedisCluster
) -> None:
    poller = setup.poller()
    raw = entry("once")
    cluster.zadd(shards.schedule(part(0)), {raw: time.time() - 1})
    assert poller._partitions is not None
    (schedule, _retry) = poller._partitions.places(part(0))
    assert poller.due_entries.graduate(schedule, [raw]) == (1, [])
    # The same batch sent again (its reply lost): the entry is gone from the set, nothing is pushed.
    assert poller.due_entries.graduate(schedule, [raw]) == (0, [])
    assert len(queued(cluster, part(0))) == 1


def test_an_entry_naming_another_queue_goes_to_its_partitions_queue_and_garbage_to_its_dead(
    setup: Setup, cluster: redis.RedisCluster
) -> None:
    cluster.zadd(shards.retry(part(2)), {entry("odd", queue="elsewhere"): 1, "not json": 2})
    assert setup.poller().enqueue_due() == 1
    assert [job["jid"] for job in queued(cluster, part(2))] == ["odd"]
    assert cluster.exists(shards.queue_key(shards.Partition("elsewhere", 0))) == 0
    assert cluster.zcard(shards.dead(part(2))) == 1
    assert cluster.get(shards.stat(part(2), "failed")) == "1"


def test_a_partition_whose_master_is_down_doesnt_stop_the_others(
    setup: Setup, cluster: redis.RedisCluster
) -> None:
    down = OneMasterDown(setup.settings, setup.ctx.client, part(1))
    poller = setup.poller(down)
    for index in range(3):
        cluster.zadd(shards.schedule(part(index)), {entry(f"j{index}"): time.time() - 1})
    assert poller.enqueue_due() == 2
    assert cluster.llen(shards.queue_key(part(0))) == 1 and cluster.llen(shards.queue_key(part(2))) == 1
    assert cluster.zcard(shards.schedule(part(1))) == 1  # waits for its master
    assert "Scheduler alpha#1" in poller._outages._since  # reported once, by its own name
    # Between polls the dead partition is left out of the looks; the others are looked at as usual.
    assert poller._partitions is not None
    cluster.zadd(shards.schedule(part(2)), {entry("soon"): time.time() + 0.3})
    assert poller._partitions.early_pass_in(5.0) is not None
    assert poller._partitions._due_soon == [part(2)]
    down.close()


def test_a_look_between_polls_reads_a_bounded_number_of_partitions(
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
) -> None:
    made = setup_for(monkeypatch, f"{QUEUE}=20")
    try:
        poller = made.poller()
        assert poller._partitions is not None
        nodes = [redis_cluster.client(port) for port in redis_cluster.ports]

        def zranges() -> int:
            stats = [node.info("commandstats") for node in nodes]
            return sum(int(s.get("cmdstat_zrange", {}).get("calls", 0)) for s in stats)

        for node in nodes:
            node.config_resetstat()
        looks = poller._partitions
        looks.early_pass_in(5.0)
        # 20 partitions, yet one look reads the first entries of 8 partitions' two sets.
        assert zranges() == 2 * partition_poller.PEEK_PARTITIONS
        looks.early_pass_in(5.0)  # again within the second: no new turn of looks
        assert zranges() == 2 * partition_poller.PEEK_PARTITIONS
        # A second later the next 8, and so on: every partition is looked at within 3 seconds.
        for _ in range(2):
            looks._looked_at -= graduation.PEEK_EVERY_S
            looks.early_pass_in(5.0)
        assert looks._turn == 24
        assert zranges() == 3 * 2 * partition_poller.PEEK_PARTITIONS
        for node in nodes:
            node.close()
    finally:
        made.clients.close()
        made.ctx.client.close()
        one_slot()


def test_a_partition_found_down_by_a_poll_is_probed_and_skipped_until_it_answers(
    setup: Setup, cluster: redis.RedisCluster
) -> None:
    """In a worker the poll tells the fetcher's partition health: no later poll waits on that master,
    and the fetcher skips it too, until a probe sees it answer."""
    down = OneMasterDown(setup.settings, setup.ctx.client, part(1))
    health = PartitionHealth(down, probe_s=60)
    poller = setup.poller(down, health)
    try:
        cluster.zadd(shards.schedule(part(1)), {entry("waits"): time.time() - 1})
        cluster.zadd(shards.schedule(part(2)), {entry("runs"): time.time() - 1})
        assert poller.enqueue_due() == 1
        assert health.is_down(part(1))
        cluster.zadd(shards.schedule(part(0)), {entry("next"): time.time() - 1})
        assert poller.enqueue_due() == 1  # partition 1 skipped without a connect
        assert cluster.zcard(shards.schedule(part(1))) == 1
    finally:
        health.close()
        down.close()


def test_a_partition_whose_master_fails_over_is_polled_on_its_new_master(
    setup: Setup, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    """CLUSTER FAILOVER of one partition's master: its next poll may meet MOVED (reported, nothing
    moved), the one after graduates on the promoted replica; the other partitions never wait."""
    poller = setup.poller()
    cluster.zadd(shards.schedule(part(1)), {entry("before"): time.time() - 1})
    assert poller.enqueue_due() == 1  # the partition's client is pinned to its master now
    redis_cluster.failover(key_slot(b"alpha#1"))
    cluster.zadd(shards.schedule(part(1)), {entry("after"): time.time() - 1})
    cluster.zadd(shards.schedule(part(2)), {entry("elsewhere"): time.time() - 1})

    def polled() -> bool:
        poller.enqueue_due()
        return cluster.llen(shards.queue_key(part(1))) == 2

    wait_until(polled, timeout=30, message="the entry graduated on the new master")
    assert [job["jid"] for job in queued(cluster, part(2))] == ["elsewhere"]
    assert cluster.zcard(shards.schedule(part(1))) == 0
