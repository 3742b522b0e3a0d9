"""Keys of the wrong type lose nothing: every script that moves a job checks types before it changes
anything and reports `{"wrongtype", key}`; the callers keep the job where it was, say which key it
is, and have the key guard move it aside at once (not at its next pass, minutes later)."""

from __future__ import annotations

import json
import time

import demo_jobs
import pytest
import redis

import cogworker
from cogworker import codec
from cogworker.api import retry
from cogworker.settings import load_settings
from cogworker.store import key_guard, keys, scripts
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.cli_runner import cli_fixture  # noqa: F401
from tests.support.redis_server import wait_until

ME = "me:1:x"


def payload(jid: str, queue: str = "default", **extra: object) -> str:
    return codec.dumps({"class": "demo_jobs.record", "jid": jid, "queue": queue, "args": [jid], **extra})


def look_alive(r: redis.Redis, identity: str = ME) -> None:
    """A presence hash, so the poller's orphan recovery leaves this in-progress list alone."""
    r.hset(keys.process(identity), "beat", "1")


def quarantined_from(r: redis.Redis, key: str) -> bool:
    prefix = keys.quarantine(key.removeprefix(keys.PREFIX) + ":")
    return any(q.startswith(prefix) for q in key_guard.quarantined(r))


# The poller: due entries onto a queue of the wrong type ---------------------------------------------


def test_a_due_entry_whose_queue_is_a_string_stays_and_the_guard_moves_the_key(r, settings) -> None:
    raw = payload("r1", queue="broken")
    r.zadd(keys.RETRY, {raw: 0})
    r.set(keys.queue("broken"), "not a list")
    parts = components.build(settings)

    assert parts.poller.enqueue_due() == 0
    assert r.zscore(keys.RETRY, raw) == 0  # still there: not lost
    assert quarantined_from(r, keys.queue("broken"))  # moved aside in the same poll

    assert parts.poller.enqueue_due() == 1
    assert json.loads(r.lindex(keys.queue("broken"), 0))["jid"] == "r1"
    assert r.zcard(keys.RETRY) == 0


def test_an_unreadable_entry_with_dead_a_string_stays_in_its_set(r, settings) -> None:
    r.zadd(keys.SCHEDULE, {"garbage": 0})
    r.set(keys.DEAD, "not a sorted set")
    parts = components.build(settings)

    parts.poller.enqueue_due()
    assert r.zscore(keys.SCHEDULE, "garbage") == 0
    assert quarantined_from(r, keys.DEAD)
    parts.poller.enqueue_due()
    assert r.zcard(keys.SCHEDULE) == 0
    assert json.loads(r.zrange(keys.DEAD, 0, -1)[0])["raw"] == "garbage"


def test_retry_now_onto_a_string_queue_names_the_key_and_keeps_the_entry(r, settings) -> None:
    from cogworker.ops import set_actions

    raw = payload("d1", queue="broken", error_class="ValueError")
    r.zadd(keys.DEAD, {raw: 1})
    r.set(keys.queue("broken"), "not a list")
    parts = components.build(settings)
    with pytest.raises(set_actions.WrongTypeKey, match="cogworker:queue:broken holds a string, not a list"):
        set_actions.retry_now(r, parts.scripts, "dead", "d1")
    assert r.zscore(keys.DEAD, raw) == 1
    assert keys.queue("broken") in r.smembers(keys.GUARD_REQUESTS)

    result = set_actions.retry_all(r, parts.scripts, "dead")
    assert (result.done, result.wrong_type) == (0, (keys.queue("broken"),))
    assert r.zscore(keys.DEAD, raw) == 1


# Settling: a failure filed into a set of the wrong type ----------------------------------------------


def test_a_settle_against_a_string_retry_set_keeps_the_job_and_files_it_later(r, settings) -> None:
    parts = components.build(settings)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    look_alive(r)
    raw = codec.dumps({"class": "demo_jobs.boom", "jid": "s1", "queue": "default", "args": ["x"]})
    r.lpush(keys.in_progress(ME), raw)
    r.set(keys.RETRY, "not a sorted set")

    filing = retry.on_failure(codec.loads(raw), ValueError("boom"))
    assert filing.set_key == keys.RETRY
    assert settler.file(raw, filing) is False
    assert settler.pending_filings == 1
    assert r.lrange(keys.in_progress(ME), 0, -1) == [raw]  # still in progress: not lost
    assert keys.RETRY in r.smembers(keys.GUARD_REQUESTS)

    parts.poller.poll_once()  # takes the request: the guard moves the key aside now
    assert quarantined_from(r, keys.RETRY)
    settler.retry_pending()
    assert settler.pending_filings == 0
    assert [json.loads(e)["jid"] for e in r.zrange(keys.RETRY, 0, -1)] == ["s1"]
    assert r.llen(keys.in_progress(ME)) == 0


def test_a_string_failure_counter_keeps_the_job_in_progress(r, settings) -> None:
    parts = components.build(settings)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    look_alive(r)
    raw = codec.dumps({"class": "demo_jobs.boom", "jid": "s2", "queue": "default", "args": ["x"], "retry": 0})
    r.lpush(keys.in_progress(ME), raw)
    day = keys.stat_failed_day(time.strftime("%Y-%m-%d", time.gmtime()))
    r.hset(day, "a", "hash")
    assert settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("boom"))) is False
    assert r.lrange(keys.in_progress(ME), 0, -1) == [raw]
    parts.poller.poll_once()
    assert quarantined_from(r, day)  # a per-day counter has a known type now
    settler.retry_pending()
    assert r.zcard(keys.DEAD) == 1 and r.llen(keys.in_progress(ME)) == 0


def test_handover_and_unsettled_filing_report_wrong_types(r, settings) -> None:
    parts = components.build(settings)
    record = codec.dumps({"set": keys.RETRY, "score": 1, "payload": {"jid": "u1", "queue": "default"}})
    r.rpush(keys.UNSETTLED, record)
    r.set(keys.RETRY, "not a sorted set")
    reply = parts.scripts.run(
        "file_unsettled", [keys.UNSETTLED, keys.RETRY, keys.orphanings("u1")], [record, 1, "{}"]
    )
    assert reply == ["wrongtype", keys.RETRY]
    assert r.lrange(keys.UNSETTLED, 0, -1) == [record]

    r.lpush(keys.in_progress(ME), "job")
    r.delete(keys.UNSETTLED)
    r.set(keys.UNSETTLED, "not a list")
    mark = keys.handed_over("rec")
    reply = parts.scripts.run("handover", [keys.UNSETTLED, keys.in_progress(ME), mark], ["rec", "job", 60])
    assert reply == ["wrongtype", keys.UNSETTLED]
    assert r.lrange(keys.in_progress(ME), 0, -1) == ["job"]


# Giving back, requeueing, the heartbeat, lock releases -----------------------------------------------


def test_give_back_onto_a_string_queue_keeps_the_job_in_progress(r, settings) -> None:
    parts = components.build(settings)
    fetch = ReliableFetch(r, r, parts.scripts, ME, settings.queue_spec)
    raw = payload("g1")
    r.lpush(keys.in_progress(ME), raw)
    r.set(keys.queue("default"), "not a list")
    with pytest.raises(key_guard.WrongTypeKey, match="cogworker:queue:default holds a string"):
        fetch.give_back(Work("default", raw))
    assert r.lrange(keys.in_progress(ME), 0, -1) == [raw]


def test_requeue_keeps_what_it_cannot_write_and_names_the_keys(r, settings) -> None:
    s = load_settings(redis_url=settings.redis_url, max_orphanings=1)
    parts = components.build(s)
    owner = "gone:1:x"
    pill, fine = payload("pill"), payload("fine", queue="other")
    for raw in (pill, fine):
        r.lpush(keys.in_progress(owner), raw)
    r.set(keys.orphanings("pill"), 1)  # this orphaning makes it a suspect (a shared death buries none)
    r.set(keys.suspects("default"), "not a list")
    r.hset(keys.orphanings("fine"), "a", "hash")

    result = parts.recovery.requeue(owner, if_dead_for=None, count_orphans=True)
    assert (result.moved, result.failed) == (0, 2)
    assert sorted(result.wrong_type) == sorted([keys.suspects("default"), keys.orphanings("fine")])
    assert sorted(r.lrange(keys.in_progress(owner), 0, -1)) == sorted([pill, fine])
    assert r.get(keys.orphanings("pill")) == "1"  # the count taken back with the job
    assert set(result.wrong_type) <= r.smembers(keys.GUARD_REQUESTS)

    # Alone on its list, the pill is for dead, which has the wrong type: kept, and dead named.
    r.delete(keys.in_progress(owner))
    r.lpush(keys.in_progress(owner), pill)
    r.set(keys.DEAD, "not a sorted set")
    result = parts.recovery.requeue(owner, if_dead_for=None, count_orphans=True)
    assert (result.moved, result.failed, result.wrong_type) == (0, 1, [keys.DEAD])
    assert r.lrange(keys.in_progress(owner), 0, -1) == [pill] and r.get(keys.orphanings("pill")) == "1"


def test_a_beat_writes_everything_but_a_wrong_type_key(r, settings) -> None:
    from cogworker.worker.loops.heartbeat import Heartbeat

    parts = components.build(settings)
    r.set(keys.LIVE_QUEUES, "not a sorted set")
    r.rpush(keys.signals(ME), "quiet")
    commands: list[str] = []
    beat = Heartbeat(
        parts.ctx,
        ME,
        reliable=True,
        busy=lambda: 0,
        running=lambda: [],
        quiet=lambda: False,
        on_command=commands.append,
    )
    beat.beat()
    assert r.exists(keys.process(ME)) and ME in r.smembers(keys.PROCESSES)
    assert commands == ["quiet"]
    assert keys.LIVE_QUEUES in r.smembers(keys.GUARD_REQUESTS)


def test_a_lock_release_on_a_wrong_type_key_asks_the_guard(r, settings) -> None:
    parts = components.build(settings)
    r.hset(keys.unique("d"), "a", "hash")
    assert parts.scripts.run("owned_delete", [keys.unique("d")], ["jid"]) == ["wrongtype", keys.unique("d")]
    parts.locks.release(keys.unique("d"), "jid")
    assert keys.unique("d") in r.smembers(keys.GUARD_REQUESTS)
    parts.poller.poll_once()
    assert r.exists(keys.unique("d")) == 0 and quarantined_from(r, keys.unique("d"))


def test_a_periodic_slot_is_not_claimed_when_its_push_cannot_be_written(r, settings) -> None:
    parts = components.build(settings)
    r.set(keys.QUEUES, "not a set")
    slot_key = keys.periodic_slot("e", 60)
    reply = parts.scripts.run(
        "periodic",
        [
            slot_key,
            keys.PERIODIC_ENTRIES,
            keys.periodic_running("e"),
            keys.queue("default"),
            keys.QUEUES,
            keys.WAKE_CHANNEL,
        ],
        ["e", "enqueue", 60, 60, "{}", 0, "j", payload("j"), "default", "", 60],
    )
    assert reply[0] == "wrongtype" and reply[2] == keys.QUEUES
    assert r.exists(slot_key) == 0 and r.llen(keys.queue("default")) == 0


# Pushing: the client's error names the key and says what to do ---------------------------------------


def test_perform_in_against_a_string_schedule_names_the_key(r, configured) -> None:
    r.set(keys.SCHEDULE, "not a sorted set")
    with pytest.raises(cogworker.WrongTypeKey) as caught:  # the public name users catch
        demo_jobs.record.perform_in(60, "later")
    message = str(caught.value)
    assert message.startswith("cogworker:schedule holds a string, not a sorted set")
    assert "key guard" in message and "cogworker doctor --fix" in message
    assert keys.SCHEDULE in r.smembers(keys.GUARD_REQUESTS)


def test_a_push_whose_job_was_written_stands_when_only_the_registry_fails(r, configured) -> None:
    r.set(keys.QUEUES, "not a set")
    jid = demo_jobs.record.perform_async("x")
    assert jid is not None
    assert json.loads(r.lindex(keys.queue("default"), 0))["jid"] == jid
    assert keys.QUEUES in r.smembers(keys.GUARD_REQUESTS)


def test_push_bulk_writes_all_of_a_batch_or_none(r, configured) -> None:
    import cogworker
    from cogworker.api.client import build_job
    from cogworker.api.push_write import write

    r.set(keys.queue("other"), "not a list")
    with pytest.raises(key_guard.WrongTypeKey, match="cogworker:queue:other holds a string, not a list"):
        cogworker.push_bulk(demo_jobs.record, [("a",), ("b",)], queue="other")
    # One batch for two queues, one of the wrong type: nothing of it is written. (Pipelined, the
    # healthy queue's jobs were written, and the caller, told the batch failed, pushed them again.)
    batch = [
        build_job(fn.name, (arg,), {}, queue=fn.queue, options=fn.options, at=None)
        for fn, arg in ((demo_jobs.record, "a"), (demo_jobs.on_other, "b"))
    ]
    with pytest.raises(key_guard.WrongTypeKey):
        write(r, configured, batch, "attempt-1")
    assert r.llen(keys.queue("default")) == 0
    r.delete(keys.queue("other"))
    write(r, configured, batch, "attempt-2")
    assert r.llen(keys.queue("default")) == 1 and r.llen(keys.queue("other")) == 1


def test_a_push_checks_only_the_keys_it_writes(r, configured) -> None:
    r.set(keys.SCHEDULE, "not a sorted set")
    # Jobs for now never touch the schedule: push_bulk writes them, as perform_async does.
    assert None not in cogworker.push_bulk(demo_jobs.record, [("a",), ("b",)])
    assert demo_jobs.record.perform_async("c") is not None
    assert r.llen(keys.queue("default")) == 3
    with pytest.raises(key_guard.WrongTypeKey, match="cogworker:schedule holds a string"):
        cogworker.push_bulk(demo_jobs.record, [("later",)], at=time.time() + 60)
    r.delete(keys.SCHEDULE)
    r.set(keys.QUEUES, "not a set")
    # The registry only lists queues: the jobs stand, and the key guard is asked to move it aside.
    assert None not in cogworker.push_bulk(demo_jobs.record, [("d",)])
    assert r.llen(keys.queue("default")) == 4
    assert keys.QUEUES in r.smembers(keys.GUARD_REQUESTS)


def test_a_unique_claim_key_of_the_wrong_type_is_an_error_naming_it(r, configured) -> None:
    import unique_jobs

    from cogworker.store.locks import unique_digest

    key = keys.unique(unique_digest({"class": unique_jobs.rebuild.name, "queue": "default", "args": [7]}))
    r.hset(key, "a", "hash")
    with pytest.raises(key_guard.WrongTypeKey, match=f"{key} holds a hash, not a string"):
        unique_jobs.rebuild.perform_async(7)


# A real worker: asked by a client, its guard runs at once ---------------------------------------------


def test_a_worker_moves_a_key_a_client_met_aside_within_seconds(r, workers, configured) -> None:
    worker = workers.start(COGWORKER_QUEUES="default")
    # A scheduled job run proves the poller has made its first pass, whose full key check comes first.
    demo_jobs.record.perform_in(0, "first-pass")
    wait_until(lambda: r.llen("test:ran") == 1, timeout=20, message="the poller's first pass")
    for _attempt in range(5):
        r.set(keys.SCHEDULE, "not a sorted set")
        try:
            demo_jobs.record.perform_in(1, "due-soon")
        except key_guard.WrongTypeKey as exc:
            assert "cogworker:schedule holds a string" in str(exc)
            break
        # The worker's own scheduler met the key between the SET and the push and had it moved
        # first (its poll is due every few seconds): the push then went through. Set it again.
        assert quarantined_from(r, keys.SCHEDULE)
        r.delete(keys.SCHEDULE)
    else:
        raise AssertionError("the client never met the wrong-type key in five tries")

    started = time.monotonic()
    wait_until(lambda: r.type(keys.SCHEDULE) == "none", timeout=15, message="the guard's move")
    assert time.monotonic() - started < 15  # the guard's own pass is every 300 s
    # The line is written just after the move: waited for (a loaded machine once read the log in between).
    wait_until(
        lambda: worker.events_named("wrong_type_key_quarantined"), timeout=10, message="the guard's line"
    )

    demo_jobs.record.perform_in(1, "after-move")
    wait_until(
        lambda: any(t.startswith("after-move ") for t in r.lrange("test:ran", 0, -1)),
        timeout=15,
        message="the job's run",
    )


def test_a_wrong_type_day_counter_doesnt_stall_a_workers_acknowledgements(r, workers, configured) -> None:
    """The fetch script counts each acknowledged job in today's counter; a hash there made every
    fetch fail, and the guard (which didn't know the key) never moved it: jobs ran, and stayed on
    the in-progress list, for ever."""
    day = keys.stat_processed_day(time.strftime("%Y-%m-%d", time.gmtime()))
    r.hset(day, "a", "hash")
    workers.start(COGWORKER_QUEUES="default")
    demo_jobs.record.perform_async("one")
    wait_until(lambda: r.llen("test:ran") == 1, timeout=20, message="the job's run")
    wait_until(lambda: quarantined_from(r, day), timeout=10, message="the counter moved aside")
    demo_jobs.record.perform_async("two")
    wait_until(lambda: r.type(day) == "string", timeout=10, message="counting again")
    wait_until(
        lambda: all(r.llen(k) == 0 for k in r.scan_iter(match=keys.IN_PROGRESS_PREFIX + "*")),
        timeout=10,
        message="both acknowledged",
    )


def test_doctor_fix_moves_wrong_type_keys_aside_when_no_worker_runs(cli, r) -> None:
    r.set(keys.SCHEDULE, "not a sorted set")
    r.hset(keys.unique("abc"), "a", "hash")
    key_guard.request(r, keys.unique("abc"))  # as a push that met it does
    assert "FAIL" in cli("doctor").out and r.type(keys.SCHEDULE) == "string"  # plain doctor: reads only
    fixed = cli("doctor", "--fix", "--json").json()["fixed"]
    assert len(fixed) == 2
    assert r.exists(keys.SCHEDULE, keys.unique("abc")) == 0
    assert quarantined_from(r, keys.SCHEDULE) and quarantined_from(r, keys.unique("abc"))


def test_one_wrong_type_in_progress_list_doesnt_stop_recovery_of_the_others(r, settings) -> None:
    parts = components.build(settings)
    r.set(keys.in_progress("bad:1:x"), "not a list")
    r.lpush(keys.in_progress("gone:1:x"), payload("g1"))
    r.sadd(keys.IN_PROGRESS_IDENTITIES, "bad:1:x", "gone:1:x")
    assert parts.recovery.recover_orphans() == 1
    assert json.loads(r.lindex(keys.queue("default"), 0))["jid"] == "g1"
    assert keys.in_progress("bad:1:x") in r.smembers(keys.GUARD_REQUESTS)


def test_the_guard_checks_and_moves_a_key_in_one_step(r, settings) -> None:
    """A guard whose type check is stale (another guard moved the key, a push made it anew, with a
    job) must not quarantine the healthy key: the move re-checks the type in the same script."""
    move = r.register_script(scripts.source("quarantine"))
    r.lpush(keys.queue("default"), payload("fresh"))
    assert move(keys=[keys.queue("default"), keys.quarantine("x")], args=["list", 60]) is None
    assert r.llen(keys.queue("default")) == 1 and r.exists(keys.quarantine("x")) == 0
    r.delete(keys.queue("default"))
    r.set(keys.queue("default"), "not a list")
    assert move(keys=[keys.queue("default"), keys.quarantine("x")], args=["list", 60]) == "string"
    assert 0 < r.ttl(keys.quarantine("x")) <= 60


def test_a_string_schedule_set_is_moved_aside_by_the_poller_that_meets_it(r, settings) -> None:
    """It used to fail every poll until the guard's own pass, minutes later, and stop the retry set
    behind it from being served."""
    r.set(keys.SCHEDULE, "not a sorted set")
    r.zadd(keys.RETRY, {payload("r2"): 0})
    parts = components.build(settings)
    assert parts.poller.enqueue_due() == 1  # the retry set is still served
    assert quarantined_from(r, keys.SCHEDULE) and r.exists(keys.SCHEDULE) == 0


def test_a_poll_step_failing_on_a_wrong_type_registry_runs_the_guard_within_seconds(r, settings) -> None:
    """A string at cogworker:inprogress-identities failed orphan recovery on every poll until the
    guard's own pass (300 s): no dead process's jobs came back meanwhile."""
    s = load_settings(redis_url=settings.redis_url, poll_interval_s=0.2, orphan_check_interval_s=0.2)
    parts = components.build(s)
    parts.poller.poll_once()  # the guard's own pass is done: the next is 300 s away
    r.set(keys.IN_PROGRESS_IDENTITIES, "not a set")
    parts.poller.start()
    try:
        wait_until(lambda: quarantined_from(r, keys.IN_PROGRESS_IDENTITIES), timeout=5, message="the move")
    finally:
        parts.poller.stop()


def test_the_cli_names_a_wrong_type_key_and_the_fix(cli, r) -> None:
    r.set(keys.queue("default"), "not a list")
    pushed = cli("enqueue", "demo_jobs.record", '["x"]')
    assert pushed.code == 1
    assert pushed.err.startswith("cogworker: cogworker:queue:default holds a string, not a list")
    r.set(keys.PAUSED, "not a set")
    paused = cli("queue", "pause", "default")
    assert paused.code == 1 and "WRONGTYPE" in paused.err and "cogworker doctor --fix" in paused.err


def test_clearing_a_queue_leaves_a_key_of_another_type_alone(r) -> None:
    from cogworker.ops import queues as queue_ops

    r.hset(keys.queue("odd"), "a", "hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        queue_ops.clear(r, "odd")
    assert r.hgetall(keys.queue("odd")) == {"a": "hash"}  # for the guard to move aside, not deleted
    r.delete(keys.queue("odd"))
    r.lpush(keys.queue("odd"), "a", "b")
    assert queue_ops.clear(r, "odd") == 2 and r.exists(keys.queue("odd")) == 0
