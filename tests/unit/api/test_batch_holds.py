"""Batch holds against a real Redis (api/batch_holds.py): a member run's nested blocks take one hold;
a run that dies inside its block has that hold released by the requeue of its process's list, unless
a later run of the member took it over; a lease the block renewed after the poller read its expiry
is not released; releasing a hold twice changes nothing the second time; a block whose hold went
while it ran (as a lapsed lease's does) gets BatchClosed at its next push once the batch completed."""

from __future__ import annotations

import time

import batch_jobs as bj
import pytest
import redis

import cogworker
from cogworker.api import batch_holds
from cogworker.api.batch import BatchClosed, as_member
from cogworker.settings import Settings
from cogworker.store import batch_scripts, keys
from tests.support import components

OWNER = "host:123:dead"


def a_batch_with_a_member() -> tuple[str, str, str]:
    """A batch (no block holds it) with one member pending: (bid, the member's jid, its payload)."""
    with cogworker.batch("holds") as b:
        jid = bj.ok.perform_async("m")
    assert jid is not None
    return b.bid, jid, cogworker.api.client.connection().lindex(keys.queue("default"), 0)


def holds(r: redis.Redis, bid: str) -> tuple[str | None, dict[str, str]]:
    fields = r.hgetall(keys.batch(bid))
    return fields.get("holds"), {k: v for k, v in fields.items() if k.startswith("hold:")}


def die_inside_the_block(bid: str, jid: str, owner: str) -> None:
    """What a run of member `jid` that enters its block on its own batch and dies there leaves: the
    hold its block took (batch_open.lua, as `Batch.jobs` calls it), never released."""
    script_keys = [keys.batch(bid), keys.batch_pending(bid), keys.BATCHES, keys.batch(bid),
                   keys.batch_pending(bid), keys.BATCH_LEASES]  # fmt: skip
    args = ["hold", repr(time.time()), bid, "", 0, f"run:{jid}", owner]
    assert batch_scripts.run(cogworker.api.client.connection(), "batch_open", script_keys, args) == 1


def test_nested_blocks_of_a_run_take_one_hold(r: redis.Redis, configured: Settings) -> None:
    bid, jid, _ = a_batch_with_a_member()
    with as_member({"bid": bid, "jid": jid}, "list-a"):
        current = cogworker.current_batch()
        assert current is not None
        with current.jobs():
            with current.jobs():
                current.add(bj.ok, "inner")
                assert holds(r, bid) == ("1", {f"hold:run:{jid}": "list-a"})
            assert holds(r, bid) == ("1", {f"hold:run:{jid}": "list-a"})
        assert holds(r, bid) == ("0", {})


def test_the_requeue_of_a_dead_run_releases_its_hold_but_not_a_later_runs(
    r: redis.Redis, settings: Settings, configured: Settings
) -> None:
    bid, jid, raw = a_batch_with_a_member()
    die_inside_the_block(bid, jid, keys.in_progress(OWNER))
    assert holds(r, bid) == ("1", {f"hold:run:{jid}": keys.in_progress(OWNER)})
    r.lpush(keys.in_progress(OWNER), raw)
    r.sadd(keys.IN_PROGRESS_IDENTITIES, OWNER)
    r.hset(keys.LAST_BEAT, OWNER, int(r.time()[0]) - 301)
    parts = components.build(settings)
    assert parts.recovery.recover_orphans() == 1
    assert holds(r, bid) == ("0", {})
    assert r.hget(keys.batch(bid), "completed_at") is None  # the member is still pending

    # A later run took the hold over (its first run's process was only silent, and is requeued now):
    # the requeue leaves the later run's hold alone.
    die_inside_the_block(bid, jid, keys.in_progress(OWNER))
    die_inside_the_block(bid, jid, keys.in_progress("host:456:alive"))
    assert holds(r, bid) == ("1", {f"hold:run:{jid}": keys.in_progress("host:456:alive")})
    r.lpush(keys.in_progress(OWNER), raw)
    r.sadd(keys.IN_PROGRESS_IDENTITIES, OWNER)
    assert parts.recovery.recover_orphans() == 1
    assert holds(r, bid) == ("1", {f"hold:run:{jid}": keys.in_progress("host:456:alive")})


def test_a_lease_renewed_after_the_poller_read_it_stays_and_a_release_repeated_changes_nothing(
    r: redis.Redis, configured: Settings
) -> None:
    bid, _, _ = a_batch_with_a_member()
    conn = cogworker.api.client.connection()
    now = time.time()
    hold = batch_holds.Hold(bid, [], [], "lease:t1", repr(now + 60))
    conn.hset(keys.batch(bid), mapping={"hold:lease:t1": repr(now + 60), "holds": 1})
    # What the poller sees when the block renewed between its read and its release: the zset's score
    # (read) is past, the hold's expiry (renewed) is not.
    conn.zadd(keys.BATCH_LEASES, {f"{bid} t1": now - 1})
    assert batch_holds.lapse_due(conn, 60.0, now=now) == 0
    assert holds(r, bid) == ("1", {"hold:lease:t1": repr(now + 60)})
    assert batch_holds.release(conn, hold, 60.0) == 1
    assert batch_holds.release(conn, hold, 60.0) == 0  # a repeat after a lost reply
    assert holds(r, bid) == ("0", {}) and r.zcard(keys.BATCH_LEASES) == 0


def test_a_block_whose_hold_was_released_meanwhile_gets_batch_closed_at_its_next_push(
    r: redis.Redis, configured: Settings
) -> None:
    conn = cogworker.api.client.connection()
    with pytest.raises(BatchClosed), cogworker.batch("lost") as b:
        # As a lease that lapsed while its renewals failed: released under the running block.
        assert batch_holds.release_all(conn, b.bid, 60.0) == 1
        bj.ok.perform_async("late")  # nothing was pending: the batch completed at the release
    status = cogworker.batch_status(b.bid)
    assert status is not None and status.complete and status.total == 0
    assert r.llen(keys.queue("default")) == 0  # the late push was refused before its write
