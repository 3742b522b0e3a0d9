"""Lost replies on the sharded worker path, per partition: each write the worker makes in a partition's
slot (the ack in fetch.lua, the filing in settle.lua, the handover in handover.lua, the poller's filing
of a handed-over record in file_unsettled.lua) sent a second time, as after a reply lost when it had
run, is a no-op; and a filing that never reached a partition's master is kept and filed once it answers.

A fault proxy in front of a cluster would have to rewrite every MOVED and CLUSTER SLOTS address, so a
lost reply is made here by sending the same call again (the brief's stand-in for it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api import retry
from cogworker.api.payload import build
from cogworker.settings import Settings
from cogworker.store import keys, shards
from cogworker.store.locks import Locks
from cogworker.store.outage import Outages
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.fetching.sharded_fetch import ShardedFetch
from cogworker.worker.settling import handover
from cogworker.worker.settling.partition_filing import file_in_partition
from cogworker.worker.settling.partition_unsettled import file_every_partition
from cogworker.worker.settling.settle import Settler
from cogworker.worker.settling.shard_route import ShardRoute, unsettled
from tests.e2e.sharded.sets_support import one_slot
from tests.support.redis_server import wait_until

IDENTITY = "test-host:1:abc"
P = shards.Partition("hot", 1)


@pytest.fixture
def sharded(env: dict[str, str], cluster: redis.RedisCluster) -> Iterator[tuple[Settings, ShardRoute]]:
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    clients = ShardClients(loaded)
    route = ShardRoute(clients, IDENTITY, Placements(), PartitionHealth(clients, probe_s=0.05))
    yield loaded, route
    route.health.close()
    clients.close()
    clients.home.close()
    one_slot()


def listed_job(
    cluster: redis.RedisCluster, retry_option: bool | int = True, partition: shards.Partition = P
) -> tuple[str, dict[str, Any]]:
    """A job fetched onto this process's list for `partition` (P by default): (raw, payload)."""
    job = build("sharded_jobs.fails", ["x"], {}, queue=partition.queue, retry=retry_option)
    raw = codec.dumps(job)
    cluster.lpush(shards.in_progress(partition, IDENTITY), raw)
    return raw, job


def failed(job: dict[str, Any]) -> retry.Filing:
    return retry.storable(retry.on_failure(job, ValueError("boom")))


def test_a_filing_sent_twice_is_filed_once_in_its_partition(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    scripts = Scripts(route.clients.home)
    raw, job = listed_job(cluster)
    filing = failed(job)
    listed = shards.in_progress(P, IDENTITY)
    assert file_in_partition((scripts, loaded, route), raw, filing, listed, "")
    # The reply lost: sent again. settle.lua answers "already filed" (True here) and writes nothing.
    assert file_in_partition((scripts, loaded, route), raw, filing, listed, "")
    assert cluster.zcard(shards.retry(P)) == 1
    assert int(cluster.get(shards.stat(P, "failed")) or 0) == 1
    assert cluster.llen(listed) == 0


def test_a_dead_filing_sent_twice_pushes_one_death_notice(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    scripts = Scripts(route.clients.home)
    raw, job = listed_job(cluster, retry_option=False)
    filing = failed(job)
    assert filing.dead
    listed = shards.in_progress(P, IDENTITY)
    for _ in range(2):
        assert file_in_partition((scripts, loaded, route), raw, filing, listed, "")
    assert cluster.zcard(shards.dead(P)) == 1
    assert cluster.llen(shards.deaths(P)) == 1
    assert cluster.zcard(keys.DEAD) == 0 and cluster.llen(keys.DEATHS) == 0


def test_a_job_a_limiter_put_back_goes_to_its_partitions_schedule_counted_limited(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    scripts = Scripts(route.clients.home)
    raw, job = listed_job(cluster)
    due = time.time() + 30
    filing = retry.storable(retry.Filing(keys.SCHEDULE, due, job))  # as api/limit_jobs.put_back names it
    listed = shards.in_progress(P, IDENTITY)
    for _ in range(2):
        assert file_in_partition((scripts, loaded, route), raw, filing, listed, "")
    assert cluster.zrange(shards.schedule(P), 0, -1, withscores=True) == [(codec.dumps(job), due)]
    assert int(cluster.get(shards.stat(P, keys.LIMITED)) or 0) == 1
    assert cluster.get(shards.stat(P, "failed")) is None
    assert cluster.llen(listed) == 0


def test_an_ack_sent_twice_counts_the_job_once(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    scripts = Scripts(route.clients.home)
    fetcher = ShardedFetch(
        route.clients, scripts, IDENTITY, loaded.queue_spec, route.placements, route.health
    )
    raw, job = listed_job(cluster)
    acks = [(raw, str(job["jid"]))]
    first = fetcher._call(P, 0, acks)
    again = fetcher._call(P, 0, acks)  # the first reply lost: the manager sends its acks again
    assert (int(first[0]), int(again[0])) == (1, 0)
    assert int(cluster.get(shards.stat(P, "processed")) or 0) == 1
    assert cluster.llen(shards.in_progress(P, IDENTITY)) == 0
    fetcher.close()


def test_a_handover_sent_twice_is_filed_once_by_the_poller(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    home = route.clients.home
    scripts = Scripts(home)
    locks = Locks(home, scripts, Outages())
    raw, job = listed_job(cluster)
    filing = failed(job)
    listed = shards.in_progress(P, IDENTITY)
    deadline = time.monotonic() + 5
    for _ in range(2):  # the second call finds the mark: handed over already, nothing pushed again
        assert handover.hand_over((home, scripts, locks), [(raw, filing, listed)], deadline, route) == 0
    assert cluster.llen(unsettled(P)) == 1
    assert cluster.llen(listed) == 0
    record = codec.loads_dict(cluster.lindex(unsettled(P), 0)) or {}
    assert record["set"] == shards.retry(P)
    cluster.sadd(keys.QUEUES, P.queue)
    cluster.hset(shards.partitions_key(), P.queue, 2)
    for _ in range(2):
        file_every_partition(route, (scripts, loaded, locks), [])
    assert cluster.zcard(shards.retry(P)) == 1
    assert cluster.llen(unsettled(P)) == 0


def test_a_handover_in_a_cleared_queues_partition_is_filed_by_the_poller(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    """`cogworker queue clear` takes the name out of the home registry; the queue's partitions stay
    recorded, and a record a stopping process handed over there must still be filed."""
    loaded, route = sharded
    home = route.clients.home
    scripts = Scripts(home)
    locks = Locks(home, scripts, Outages())
    raw, job = listed_job(cluster)
    listed = shards.in_progress(P, IDENTITY)
    assert (
        handover.hand_over((home, scripts, locks), [(raw, failed(job), listed)], time.monotonic() + 5, route)
        == 0
    )
    cluster.hset(shards.partitions_key(), P.queue, 2)  # recorded, and not in the registry (cleared)
    assert not cluster.sismember(keys.QUEUES, P.queue)
    file_every_partition(route, (scripts, loaded, locks), [])
    assert cluster.zcard(shards.retry(P)) == 1
    assert cluster.llen(unsettled(P)) == 0


class _Unreachable(ShardClients):
    """A partition's master that refuses connections (a real refused connect, not a mock) until
    `reachable` is set: a filing sent to it never ran."""

    reachable = False

    def of(self, partition: shards.Partition) -> redis.Redis:
        if partition == P and not self.reachable:
            return redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
        return super().of(partition)


def test_a_filing_that_never_reached_its_master_is_kept_and_filed_once_it_answers(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, _route = sharded
    clients = _Unreachable(loaded)
    route = ShardRoute(clients, IDENTITY, Placements(), PartitionHealth(clients, probe_s=0.05))
    ctx = RedisContext.build(loaded, clients.home)
    settler = Settler(ctx, keys.in_progress(IDENTITY), route=route)
    raw, job = listed_job(cluster)
    route.placements.add([Work(P.queue, raw, partition=P)])
    assert settler.file(raw, failed(job)) is False  # kept
    assert settler.pending_filings == 1 and route.health.is_down(P)
    settler.retry_pending()  # skipped while the partition is down: no wait on its master
    assert settler.pending_filings == 1
    clients.reachable = True
    wait_until(lambda: not route.health.is_down(P), timeout=10, message="the probe saw the master again")
    settler.retry_pending()
    assert settler.pending_filings == 0
    assert cluster.zcard(shards.retry(P)) == 1
    assert cluster.llen(shards.in_progress(P, IDENTITY)) == 0
    route.health.close()
    clients.close()


def test_the_pollers_filing_skips_a_master_that_refuses_and_files_every_other_partition(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    home = route.clients.home
    scripts = Scripts(home)
    locks = Locks(home, scripts, Outages())
    other = shards.Partition(P.queue, 0)
    deadline = time.monotonic() + 5
    for partition in (P, other):  # a stopping process handed over one filing in each partition
        raw, job = listed_job(cluster, partition=partition)
        listed = shards.in_progress(partition, IDENTITY)
        assert handover.hand_over((home, scripts, locks), [(raw, failed(job), listed)], deadline, route) == 0
    cluster.sadd(keys.QUEUES, P.queue)
    cluster.hset(shards.partitions_key(), P.queue, 2)
    down = _Unreachable(loaded, home=home)
    down_route = ShardRoute(down, IDENTITY, Placements(), PartitionHealth(down, probe_s=0.05))
    with pytest.raises(redis.ConnectionError):
        file_every_partition(down_route, (scripts, loaded, locks), [])
    # The partition that answered is filed; the refused one keeps its record, and is known to be down.
    assert cluster.zcard(shards.retry(other)) == 1 and cluster.llen(unsettled(other)) == 0
    assert cluster.zcard(shards.retry(P)) == 0 and cluster.llen(unsettled(P)) == 1
    assert down_route.health.is_down(P)
    # While it is known to be down the poller doesn't wait on it: nothing raised, nothing filed there.
    assert file_every_partition(down_route, (scripts, loaded, locks), []) == 0
    down_route.health.close()
    down.close()
    file_every_partition(route, (scripts, loaded, locks), [])  # the master answers again: filed once
    assert cluster.zcard(shards.retry(P)) == 1 and cluster.llen(unsettled(P)) == 0


def test_a_filing_whose_answer_was_lost_is_looked_up_in_its_own_partition(
    sharded: tuple[Settings, ShardRoute], cluster: redis.RedisCluster
) -> None:
    loaded, route = sharded
    home = route.clients.home
    scripts = Scripts(home)
    locks = Locks(home, scripts, Outages())
    _raw, job = listed_job(cluster)
    filing = failed(job)
    assert filing.text is not None
    cluster.zadd(shards.retry(P), {filing.text: filing.score})  # the filing ran; its answer was lost
    unanswered = [(shards.retry(P), filing.text, job), (shards.retry(P), "never filed", job)]
    file_every_partition(route, (scripts, loaded, locks), unanswered)
    # Both asked of P's master (not the home slot's): the one found there settled, the other dropped.
    assert unanswered == []
    assert cluster.zcard(shards.retry(P)) == 1
