"""A sharded periodic slot under faults, one ticker in this process on a real 3-master cluster, for each
write the sharded path adds: the claim script (claim, run history, outbox entry, in the home slot) and
the outbox move's push (into the job's partition). Its reply lost after it ran: sent again it answers
"taken" and writes nothing; the slot's job is pushed once. Never run: the next check claims the slot.
And the script, run in its sharded mode, touches only the keys it declared, all in the home slot."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from structlog.testing import capture_logs

import cogworker
from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api import push_write
from cogworker.api.periodic import Entry
from cogworker.api.periodic_outbox import entry_id
from cogworker.store import fanout, keys, outbox, shards
from cogworker.store.redis_context import RedisContext
from cogworker.worker.loops.ticker import Ticker
from tests.e2e.sharded.periodic_support import claimed_jid, home_master, queued_anywhere
from tests.e2e.sharded.sets_support import one_slot
from tests.support.monitor import Monitor
from tests.support.redis_cluster import RedisCluster

QUEUE = "pfault"
NAME = "sharded-hourly"


@cogworker.job(queue=QUEUE, name="tests.sharded_periodic_target")
def target() -> None:
    """Never run here: the tests read what was pushed."""


def at(hour: int, minute: int, second: int = 0) -> float:
    return dt.datetime(2024, 5, 1, hour, minute, second, tzinfo=dt.UTC).timestamp()


SLOT = int(at(15, 0))
ENTRY_ID = entry_id(NAME, SLOT)


@dataclass
class Rig:
    ticker: Ticker
    ctx: RedisContext

    def baseline(self) -> None:
        self.ticker.tick(now=at(14, 20))  # a new entry: 14:00 is handled without running

    def sweep_later(self) -> int:
        """Another worker's sweep, once the entry's lease lapsed."""
        mover = outbox.Mover(fanout.clients_of(self.ctx.client), self.ctx.settings)
        return mover.sweep(None, now=time.time() + outbox.OUTBOX_LEASE_S + 1)


@pytest.fixture
def rig(env: dict[str, str], cluster: redis.RedisCluster) -> Iterator[Rig]:
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    ctx = RedisContext.build(loaded)
    yield Rig(Ticker(ctx, entries=[Entry(NAME, target, "0 * * * *")]), ctx)
    fanout.release(ctx.client)
    ctx.client.close()
    one_slot()


def history(cluster: redis.RedisCluster) -> list[dict[str, Any]]:
    return [codec.loads(raw) for raw in cluster.lrange(keys.periodic_runs(NAME), 0, -1)]


def pushed_once(cluster: redis.RedisCluster) -> None:
    """The slot's job is in its partition once, as the claim recorded it, and nothing is left."""
    jid = claimed_jid(cluster, NAME, SLOT)
    assert jid is not None and queued_anywhere(cluster, QUEUE, 1) == {jid}
    assert cluster.llen(shards.queue_key(shards.Partition(QUEUE))) == 1
    assert [(r["slot"], r["outcome"], r["jid"]) for r in history(cluster)] == [(SLOT, "enqueued", jid)]
    assert cluster.hlen(keys.OUTBOX) == 0


def test_the_claims_reply_lost_after_it_ran_sent_again_is_taken_and_the_job_pushed_once(
    rig: Rig, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.baseline()
    real = rig.ticker._scripts.run
    lost: list[tuple[Any, ...]] = []

    def reply_lost(name: str, keys_: list[str], args: list[Any], client: Any = None) -> Any:
        reply = real(name, keys_, args, client=client)
        if name == "periodic" and args[1] == "enqueue" and not lost:
            lost.append((name, keys_, args, client))
            raise redis.ConnectionError("the reply was lost")
        return reply

    monkeypatch.setattr(rig.ticker._scripts, "run", reply_lost)
    with pytest.raises(redis.ConnectionError):
        rig.ticker.tick(now=at(15, 0, 2))
    # It ran: the slot is claimed and its entry written; nothing pushed yet.
    assert cluster.hkeys(keys.OUTBOX) == [ENTRY_ID] and queued_anywhere(cluster, QUEUE, 1) == set()
    name, keys_, args, client = lost[0]
    assert real(name, keys_, args, client=client)[0] == "taken"  # sent again: nothing more written
    assert cluster.hkeys(keys.OUTBOX) == [ENTRY_ID] and len(history(cluster)) == 1
    rig.ticker.tick(now=at(15, 0, 3))  # the next check moves the entry whose reply it lost
    pushed_once(cluster)
    assert rig.sweep_later() == 0
    pushed_once(cluster)


def test_a_claim_that_never_ran_is_made_by_the_next_check(
    rig: Rig, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.baseline()
    real = rig.ticker._scripts.run
    refused: list[str] = []

    def never_sent(name: str, keys_: list[str], args: list[Any], client: Any = None) -> Any:
        if name == "periodic" and args[1] == "enqueue" and not refused:
            refused.append(name)
            raise redis.ConnectionError("Error connecting: the script was never sent")
        return real(name, keys_, args, client=client)

    monkeypatch.setattr(rig.ticker._scripts, "run", never_sent)
    with pytest.raises(redis.ConnectionError):
        rig.ticker.tick(now=at(15, 0, 2))
    assert claimed_jid(cluster, NAME, SLOT) is None and cluster.hlen(keys.OUTBOX) == 0
    assert history(cluster) == []
    rig.ticker.tick(now=at(15, 0, 3))
    pushed_once(cluster)


@pytest.mark.parametrize("fault", ["lost_after_it_ran", "never_ran"])
def test_the_pushs_reply_lost_leaves_the_entry_and_its_next_move_pushes_nothing_twice(
    rig: Rig, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    rig.baseline()
    real = push_write.write
    failed: list[bool] = []

    def flaky(*args: Any, **kwargs: Any) -> None:
        if not failed:
            failed.append(True)
            if fault == "lost_after_it_ran":
                real(*args, **kwargs)
            raise redis.ConnectionError("the push's reply was lost")
        real(*args, **kwargs)

    monkeypatch.setattr(push_write, "write", flaky)
    with capture_logs() as logs:
        rig.ticker.tick(now=at(15, 0, 2))  # claimed: the failed push is logged, not raised
    assert [e["entry"] for e in logs if e["event"] == "periodic_push_left"] == [ENTRY_ID]
    assert cluster.hkeys(keys.OUTBOX) == [ENTRY_ID]
    jid = claimed_jid(cluster, NAME, SLOT)
    assert queued_anywhere(cluster, QUEUE, 1) == ({jid} if fault == "lost_after_it_ran" else set())
    if fault == "lost_after_it_ran":
        assert rig.sweep_later() == 1  # another worker's sweep: the job's marker skips it
        rig.ticker.tick(now=at(15, 0, 3))  # this ticker's retry finds the entry gone
    else:
        rig.ticker.tick(now=at(15, 0, 3))  # this ticker moves it again at its next check
        assert rig.sweep_later() == 0
    pushed_once(cluster)


def test_the_sharded_claim_touches_only_its_declared_keys_all_in_the_home_slot(
    rig: Rig, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    node = next(n for n in redis_cluster.nodes if n.port == home_master(redis_cluster))
    monitor = Monitor(node.url)
    try:
        rig.baseline()
        rig.ticker.tick(now=at(15, 0, 2))
    finally:
        commands = monitor.stop()
    pushed_once(cluster)
    reader = redis.Redis.from_url(node.url)
    home = key_slot(b"home")
    declared: set[str] = set()
    ran: list[tuple[str, list[str]]] = []
    in_periodic = False
    for command in commands:
        if command.name in ("EVAL", "EVALSHA"):
            declared = {str(k) for k in reader.command_getkeys(*command.args)}
            in_periodic = any(":periodic:slot:" in k for k in declared)
            if in_periodic:
                assert {key_slot(k.encode()) for k in declared} == {home}, declared
        elif command.source == "lua" and in_periodic and command.name != "TIME":
            ran.append((command.name, [str(k) for k in reader.command_getkeys(*command.args)]))
    reader.close()
    assert ("HSET", [outbox.key(None)]) in ran
    assert [(name, k) for name, found in ran for k in found if k not in declared] == []


def test_an_until_executed_slot_takes_the_home_lock_and_the_next_is_skipped_without_an_entry(
    env: dict[str, str], cluster: redis.RedisCluster
) -> None:
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    ctx = RedisContext.build(loaded)
    try:
        ticker = Ticker(ctx, entries=[Entry(NAME, target, "0 * * * *", until_executed=True)])
        ticker.tick(now=at(14, 20))
        ticker.tick(now=at(15, 0, 2))
        jid = claimed_jid(cluster, NAME, SLOT)
        assert cluster.get(keys.periodic_running(NAME)) == jid
        ticker.tick(now=at(16, 0, 2))  # the 15:00 run hasn't run: 16:00 is skipped
        assert [r["outcome"] for r in history(cluster)] == ["running", "enqueued"]
        assert queued_anywhere(cluster, QUEUE, 1) == {jid} and cluster.hlen(keys.OUTBOX) == 0
    finally:
        fanout.release(ctx.client)
        ctx.client.close()
        one_slot()
