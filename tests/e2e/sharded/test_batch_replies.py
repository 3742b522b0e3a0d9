"""A sharded worker's batch member acks (worker/settling/batch_shard_acks.py) on a real 3-master cluster,
through the settler's own code: an ack sent a second time after a lost reply counts the member once
and moves the entry the first call wrote; an ack whose call timed out against its partition's stopped
master (run when the master resumes, its reply lost, or never run) is kept, and counted once when
retried after the master answers again.

A fault proxy in front of a cluster would have to rewrite every MOVED and CLUSTER SLOTS address, so a
lost reply is made by sending the same call again (as tests/e2e/sharded/test_worker_replies.py does)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sharded_batch_jobs as sbj
from redis.crc import key_slot

import cogworker
from cogworker import codec
from cogworker import settings as settings_module
from cogworker.settings import Settings
from cogworker.store import outbox, shards
from cogworker.store.outage import Outages
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.settling.batch_shard_acks import PendingAck, ShardedMemberAcks
from cogworker.worker.settling.shard_route import ShardRoute
from tests.e2e.sharded import batch_support
from tests.e2e.sharded.batch_support import MEMBERS
from tests.support.redis_cluster import RedisCluster

IDENTITY = "test-host:1:batch"
api = batch_support.api


@pytest.fixture
def acks(
    api: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, ShardRoute, ShardedMemberAcks]]:
    monkeypatch.setenv("COGWORKER_REDIS_TIMEOUT_S", "0.5")
    loaded = settings_module.load_settings()
    clients = ShardClients(loaded)
    route = ShardRoute(clients, IDENTITY, Placements(), PartitionHealth(clients, probe_s=0.05))
    yield loaded, route, ShardedMemberAcks(route, loaded, Outages())
    route.health.close()
    clients.close()
    clients.home.close()


def fetched(cluster: redis.RedisCluster, jid: str) -> tuple[shards.Partition, str, dict[str, Any]]:
    """The member taken off its partition's queue onto this process's list there, as a fetch does."""
    for p in MEMBERS:
        for raw in cluster.lrange(shards.queue_key(p), 0, -1):
            if codec.loads(raw)["jid"] == jid:
                cluster.lrem(shards.queue_key(p), 1, raw)
                cluster.lpush(shards.in_progress(p, IDENTITY), raw)
                return p, str(raw), codec.loads(raw)
    raise AssertionError(f"{jid} not queued")


def status(bid: str) -> cogworker.BatchStatus:
    found = cogworker.batch_status(bid)
    assert found is not None
    return found


def test_an_ack_sent_again_after_a_lost_reply_counts_once(
    acks: tuple[Settings, ShardRoute, ShardedMemberAcks], cluster: redis.RedisCluster
) -> None:
    _loaded, route, members = acks
    with cogworker.batch("resent", **sbj.callbacks("resent")) as b:
        jid = sbj.ok.perform_async("a")
        sbj.ok.perform_async("b")
    assert jid is not None
    p, raw, job = fetched(cluster, jid)
    listed = route.list_of(p)
    # The first call ran (acknowledged, entry written) and its reply was lost before the move.
    reply, _p, _entry = members.write(PendingAck(raw, job, "ok", listed))
    assert reply == 1
    assert cluster.hlen(outbox.key(p)) == 1 and status(b.bid).pending == 2
    members.ack(raw, job, "ok", listed)  # sent again: acknowledged already, the entry moved
    assert members.pending == 0 and cluster.hlen(outbox.key(p)) == 0
    done = status(b.bid)
    assert (done.total, done.pending, done.done) == (2, 1, 1)
    members.ack(raw, job, "ok", listed)  # and again: nothing changes
    assert (status(b.bid).done, int(cluster.get(shards.stat(p, "processed")) or 0)) == (1, 1)


def test_an_ack_timed_out_on_a_stopped_master_is_kept_and_counted_once_when_retried(
    acks: tuple[Settings, ShardRoute, ShardedMemberAcks],
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
) -> None:
    _loaded, route, members = acks
    with cogworker.batch("kept", **sbj.callbacks("kept")) as b:
        jid = sbj.ok.perform_async("only")
    assert jid is not None
    p, raw, job = fetched(cluster, jid)
    port = redis_cluster.owner(key_slot(f"{p.queue}#{p.index}".encode()))[0]
    node = next(n for n in redis_cluster.nodes if n.port == port)
    route.client(p).ping()  # connected before the master stops: the ack's call times out
    node.pause()
    try:
        members.ack(raw, job, "ok", route.list_of(p))
    finally:
        node.resume()
    assert members.pending == 1 and members.holding() == [raw]
    redis_cluster.wait_ok()
    assert members.retry() is True
    assert members.pending == 0
    done = status(b.bid)
    assert (done.total, done.pending, done.done) == (1, 0, 1)
    assert cluster.hlen(outbox.key(p)) == 0
    assert members.retry() is True and status(b.bid).done == 1
