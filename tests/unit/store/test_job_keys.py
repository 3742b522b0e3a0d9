"""The per-job keys the recovery scripts are given (store/job_keys.py, requeue.lua, reconcile.lua):
Python declares what the scripts need for every kind of payload; a job whose keys weren't declared
(it landed after the caller read the list) is left where it was, untouched, and named, and the next
pass moves it: nothing lost, nothing moved twice."""

from __future__ import annotations

import time

import redis

from cogworker import codec
from cogworker.settings import Settings
from cogworker.store import job_keys, keys
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.fetch import digest as fetch_digest
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from tests.support import components

OWNER = "host:1:dead"


def job(jid: str, queue: str = "default", **extra: object) -> str:
    return codec.dumps({"class": "demo_jobs.record", "args": [], "jid": jid, "queue": queue, **extra})


# Payloads the scripts read differently from a plain job: each must need no second pass.
ODD_PAYLOADS = [
    job("plain"),
    job("elsewhere", queue="reports"),
    job("emptyq", queue=""),
    codec.dumps({"class": "x", "jid": 7, "queue": "numbers"}),
    codec.dumps({"class": "x", "jid": "noq"}),
    "not json at all",
    "[1, 2]",
    job("pe", periodic_name="nightly", periodic_until_executed=True),
    job("pe-off", periodic_name="hourly", periodic_until_executed=False),
    codec.dumps({"class": "x", "periodic_name": "nojid", "periodic_until_executed": True}),
]


def requeue(scripts: Scripts, client: redis.Redis, declared: job_keys.Declared) -> list[object]:
    extra_keys, extra_args = declared.keys_and_args()
    fixed_keys = [keys.in_progress(OWNER), keys.process(OWNER), keys.LAST_BEAT, keys.DEAD]
    fixed_keys += [keys.QUEUES, keys.LIVE_QUEUES, keys.CANCELS]
    reply: list[object] = scripts.run(
        "requeue",
        [*fixed_keys, *extra_keys],
        ["default", OWNER, "", "1", 60, 5, 120, 60, int(time.time()), 2, "", *extra_args],
        client=client,
    )
    return reply


def test_python_declares_what_requeue_needs_for_every_payload(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings)
    for raw in ODD_PAYLOADS:
        r.lpush(keys.in_progress(OWNER), raw)
    declared = job_keys.Declared()
    declared.add_jobs(ODD_PAYLOADS, "default")
    assert declared.queues == {"default", "reports", "numbers"}
    assert declared.entries == {"nightly"}
    reply = requeue(parts.scripts, parts.client, declared)
    assert reply[:8] == [len(ODD_PAYLOADS), 0, 3, 0, 0, 0, 0, 0]  # all moved, nothing left, no needs
    assert r.llen(keys.in_progress(OWNER)) == 0
    assert [r.llen(keys.queue(q)) for q in ("reports", "numbers", "default")] == [1, 1, 8]
    assert r.get(keys.periodic_running("nightly")) == "pe"
    assert r.get(keys.orphanings("plain")) == "1"
    # A payload without a (string) jid is counted too, by the digest of its bytes.
    for raw in ("not json at all", "[1, 2]", codec.dumps({"class": "x", "jid": 7, "queue": "numbers"})):
        assert r.get(keys.orphanings_raw(job_keys.digest(raw))) == "1"


def test_a_job_whose_keys_were_not_declared_waits_for_the_next_pass(
    r: redis.Redis, settings: Settings
) -> None:
    parts = components.build(settings)
    known, late = job("known"), job("late", queue="reports", periodic_name="n", periodic_until_executed=True)
    r.lpush(keys.in_progress(OWNER), known, late)
    declared = job_keys.Declared()
    declared.add_jobs([known], "default")  # read before `late` landed
    reply = requeue(parts.scripts, parts.client, declared)
    moved, failed, _unlisted, _wrong, _cancelled, left, n_needs, _suspects = reply[:8]
    assert (moved, failed, left, n_needs) == (1, 0, 1, 3)
    needs = reply[8 + int(reply[2]) : 8 + int(reply[2]) + 2 * int(n_needs)]  # type: ignore[call-overload]
    assert sorted(zip(needs[::2], needs[1::2], strict=True)) == [
        ("counter", "late"),
        ("lock", "n"),
        ("queue", "reports"),
    ]
    # Untouched: still on the list, not counted, no lock taken, not on its queue.
    assert r.lrange(keys.in_progress(OWNER), 0, -1) == [late]
    assert r.get(keys.orphanings("late")) is None and r.get(keys.periodic_running("n")) is None
    assert r.llen(keys.queue("reports")) == 0
    declared.add_needs(needs)
    assert requeue(parts.scripts, parts.client, declared)[:8] == [1, 0, 1, 0, 0, 0, 0, 0]
    assert r.lrange(keys.queue("reports"), 0, -1) == [late] and r.lrange(keys.queue("default"), 0, -1) == [
        known
    ]
    assert r.get(keys.orphanings("late")) == "1" and r.get(keys.periodic_running("n")) == "late"


def test_recovery_takes_a_second_pass_for_a_payload_python_reads_otherwise(
    r: redis.Redis, settings: Settings
) -> None:
    """Bytes that aren't UTF-8: Python can't decode the payload (so declares the default queue), Lua
    reads its queue name; the script names it and the second pass moves the job there."""
    parts = components.build(settings)
    raw = b'{"class":"x","jid":"bin1","queue":"caf\xe9"}'
    r.lpush(keys.in_progress(OWNER), raw)
    result = parts.recovery.requeue(OWNER, if_dead_for=None, count_orphans=True)
    assert (result.moved, result.failed) == (1, 0)
    raw_client = redis.Redis.from_url(settings.redis_url)
    assert raw_client.lrange(keys.queue("caf").encode() + b"\xe9", 0, -1) == [raw]
    assert r.llen(keys.in_progress(OWNER)) == 0
    raw_client.close()


def test_reconcile_leaves_an_undeclared_entry_then_puts_it_back(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings, identity=OWNER)
    fetcher = ReliableFetch(parts.client, parts.client, parts.scripts, OWNER, settings.queue_spec)
    held, lost = job("held"), job("lost", queue="reports")
    r.lpush(keys.in_progress(OWNER), held, lost)
    reconciled = fetcher.reconcile([held], [lost], settings.max_orphanings)
    assert (reconciled.requeued, reconciled.kept) == (1, 0)
    assert r.lrange(keys.in_progress(OWNER), 0, -1) == [held]
    assert r.lrange(keys.queue("reports"), 0, -1) == [lost] and r.get(keys.orphanings("lost")) == "1"
    fetcher.close()


def test_reconcile_script_leaves_an_undeclared_entry_untouched(r: redis.Redis, settings: Settings) -> None:
    parts = components.build(settings, identity=OWNER)
    late = job("late", queue="reports")
    r.lpush(keys.in_progress(OWNER), late)
    declared = job_keys.Declared()
    declared.add_jobs([], "default")  # read before `late` landed

    def run() -> list[object]:
        extra_keys, extra_args = declared.keys_and_args()
        reply: list[object] = parts.scripts.run(
            "reconcile",
            [keys.in_progress(OWNER), keys.DEAD, keys.QUEUES, *extra_keys],
            ["default", 60, 5, 60, int(time.time()), 2, *extra_args, 0, fetch_digest(late)],
            client=parts.client,
        )
        return reply

    reply = run()
    assert reply == [0, 1, 0, 1, 2, "queue", "reports", "counter", "late"]
    assert r.lrange(keys.in_progress(OWNER), 0, -1) == [late] and r.get(keys.orphanings("late")) is None
    declared.add_needs(reply[5:9])
    assert run() == [1, 0, 0, 0, 0]
    assert r.lrange(keys.queue("reports"), 0, -1) == [late] and r.get(keys.orphanings("late")) == "1"


def test_a_cancelled_member_whose_batch_layout_was_not_declared_waits_then_is_counted_once(
    r: redis.Redis, settings: Settings
) -> None:
    """requeue.lua counts a member cancelled while its process died in its batch, over the layout the
    caller declared for it; one that landed after the read is left untouched, its need named."""
    parts = components.build(settings)
    member = job("m1", bid="b1")
    r.hset(keys.batch("b1"), mapping={"total": 1, "holds": 0})
    r.sadd(keys.batch_pending("b1"), "m1")
    r.zadd(keys.CANCELS, {"m1": time.time()})
    r.lpush(keys.in_progress(OWNER), member)

    def run(declared: job_keys.Declared) -> list[object]:
        job_list, job_args = declared.keys_and_args()
        batch_list, batch_args = declared.batch_keys_and_args()
        member_list, member_args = declared.member_keys_and_args(None, 60)
        fixed = [keys.in_progress(OWNER), keys.process(OWNER), keys.LAST_BEAT, keys.DEAD]
        fixed += [keys.QUEUES, keys.LIVE_QUEUES, keys.CANCELS]
        fixed_args = ["default", OWNER, "", "1", 60, 5, 120, 60, int(time.time()), 2, ""]
        reply: list[object] = parts.scripts.run(
            "requeue",
            [*fixed, *job_list, *batch_list, *member_list],
            [*fixed_args, *job_args, *batch_args, *member_args],
            client=parts.client,
        )
        return reply

    declared = job_keys.Declared()
    declared.add_jobs([member], "default")
    declared.members.clear()  # as if it landed after the read: its batch layout not declared
    reply = run(declared)
    assert reply[:8] == [0, 0, 0, 0, 0, 1, 1, 0] and reply[8:10] == ["member", "m1"]
    assert r.lrange(keys.in_progress(OWNER), 0, -1) == [member] and r.scard(keys.batch_pending("b1")) == 1
    declared.add_jobs([member], "default")
    reply = run(declared)
    assert reply[:8] == [0, 0, 0, 0, 1, 0, 0, 0] and reply[8:9] == [member]  # dropped, not requeued
    assert r.llen(keys.in_progress(OWNER)) == 0 and r.llen(keys.queue("default")) == 0
    assert r.hget(keys.batch("b1"), "failed") == "1" and r.hget(keys.batch("b1"), "completed_at")
    assert r.hget(keys.batch_failures("b1"), "m1") == job_keys.CANCELLED_ERROR
