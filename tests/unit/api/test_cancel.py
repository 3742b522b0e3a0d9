"""`cogworker.cancel(jid)` against a real Redis, for the jobs no worker holds: queued, scheduled and
retrying jobs are taken off their queue or set (their unique claim released, their status
"cancelled", counted), finished ones (dead, status complete) and unknown ones say so, bad input is
refused with nothing written, a cancel record of the wrong type stops it with nothing lost, and the
fake testing mode drops the recorded job. Running jobs are in tests/e2e/worker/test_cancel.py."""

from __future__ import annotations

import time

import pytest
import redis

import cogworker
from cogworker import codec, testing
from cogworker.ops import cancel as cancel_ops
from cogworker.settings import Settings
from cogworker.store import keys


def cancelled_count(r: redis.Redis) -> int:
    return int(r.get(keys.stat("cancelled")) or 0)


def test_a_queued_job_is_taken_off_its_queue_and_counted(r: redis.Redis, configured: Settings) -> None:
    import demo_jobs

    keep = demo_jobs.record.perform_async("keep")
    jid = demo_jobs.record.perform_async("gone")
    outcome = cogworker.cancel(jid)
    assert (outcome.case, outcome.queue, outcome.job, outcome.stopped) == (
        "queued",
        "default",
        "demo_jobs.record",
        True,
    )
    assert [codec.loads(raw)["jid"] for raw in r.lrange(keys.queue("default"), 0, -1)] == [keep]
    assert cancelled_count(r) == 1
    assert r.zscore(keys.CANCELS, jid) is None  # nothing left to stop: the record's entry is gone
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert int(r.get(keys.stat_day("cancelled", day)) or 0) == 1


def test_a_scheduled_job_is_taken_off_the_schedule(r: redis.Redis, configured: Settings) -> None:
    import demo_jobs

    jid = demo_jobs.record.perform_in(3600, "later")
    outcome = cogworker.cancel(jid)
    assert outcome.case == "scheduled" and outcome.stopped
    assert r.zcard(keys.SCHEDULE) == 0
    assert cancelled_count(r) == 1


def test_a_retrying_job_is_taken_off_the_retry_set(r: redis.Redis, configured: Settings) -> None:
    payload = {"class": "demo_jobs.boom", "args": ["x"], "jid": "retrying01", "queue": "default"}
    payload.update(retry_count=0, error_class="ValueError", error_message="x", failed_at=time.time())
    other = {**payload, "jid": "retrying02"}
    r.zadd(keys.RETRY, {codec.dumps(payload): time.time() + 60, codec.dumps(other): time.time() + 60})
    outcome = cogworker.cancel("retrying01")
    assert outcome.case == "retrying" and outcome.job == "demo_jobs.boom"
    assert [codec.loads(raw)["jid"] for raw in r.zrange(keys.RETRY, 0, -1)] == ["retrying02"]
    assert cancelled_count(r) == 1


def test_the_unique_claim_is_released_and_the_status_says_cancelled(
    r: redis.Redis, configured: Settings
) -> None:
    import unique_jobs

    jid = unique_jobs.rebuild.set(status=True).perform_async(7)
    assert jid is not None
    assert unique_jobs.rebuild.perform_async(7) is None  # the claim holds
    claims = r.keys(keys.UNIQUE_PREFIX + "*")
    assert len(claims) == 1
    assert cogworker.cancel(jid).case == "queued"
    assert r.keys(keys.UNIQUE_PREFIX + "*") == []
    assert cogworker.status(jid) == "cancelled"
    assert unique_jobs.rebuild.perform_async(7) is not None  # a new copy may be pushed again
    # Cancelling it again answers what the cancel did (and counts it once).
    again = cogworker.cancel(jid)
    assert (again.case, again.stopped, again.detail) == (
        "queued",
        True,
        "queued: taken off queue default; it will not run",
    )
    assert int(r.get(keys.stat("cancelled")) or 0) == 1


def test_a_claim_taken_by_another_copy_is_not_released(r: redis.Redis, configured: Settings) -> None:
    import unique_jobs

    jid = unique_jobs.rebuild.perform_async(8)
    assert jid is not None
    (claim,) = r.keys(keys.UNIQUE_PREFIX + "*")
    r.set(claim, "another-copy")  # the claim expired and a newer copy took it
    assert cogworker.cancel(jid).case == "queued"
    assert r.get(claim) == "another-copy"


def test_a_dead_job_is_finished_and_nothing_changes(r: redis.Redis, configured: Settings) -> None:
    payload = {"class": "demo_jobs.boom", "args": ["x"], "jid": "deadjob01", "queue": "default"}
    r.zadd(keys.DEAD, {codec.dumps(payload): time.time()})
    outcome = cogworker.cancel("deadjob01")
    assert (outcome.case, outcome.stopped) == ("finished", False)
    assert "dead" in outcome.detail
    assert r.zcard(keys.DEAD) == 1
    assert r.zscore(keys.CANCELS, "deadjob01") is None
    assert cancelled_count(r) == 0


def test_a_completed_job_is_finished(r: redis.Redis, configured: Settings) -> None:
    r.hset(keys.status("done01"), mapping={"status": "complete", "class": "demo_jobs.record", "queue": "q"})
    outcome = cogworker.cancel("done01")
    assert (outcome.case, outcome.job, outcome.queue) == ("finished", "demo_jobs.record", "q")
    assert "complete" in outcome.detail


def test_an_unknown_job_is_not_found_and_its_cancel_is_kept(r: redis.Redis, configured: Settings) -> None:
    outcome = cogworker.cancel("never-pushed")
    assert (outcome.case, outcome.stopped, outcome.searched_all) == ("not_found", False, True)
    assert "finished or unknown" in outcome.detail
    # Kept: a worker holding it, or fetching it after a crash, must not run it.
    assert r.zscore(keys.CANCELS, "never-pushed") is not None
    assert cancelled_count(r) == 0


def test_the_cancel_record_is_trimmed_by_size(
    r: redis.Redis, configured: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cancel_ops, "CANCEL_MAX", 3)
    for n in range(5):
        cogworker.cancel(f"job{n}")
    assert r.zrange(keys.CANCELS, 0, -1) == ["job2", "job3", "job4"]


@pytest.mark.parametrize(
    ("jid", "error"), [(42, TypeError), ("", ValueError), ("a b", ValueError), ("x" * 101, ValueError)]
)
def test_bad_input_is_refused_with_nothing_written(
    r: redis.Redis, configured: Settings, jid: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="jid"):
        cogworker.cancel(jid)  # type: ignore[arg-type]
    assert r.dbsize() == 0


def test_a_record_of_the_wrong_type_stops_it_with_nothing_lost(r: redis.Redis, configured: Settings) -> None:
    import demo_jobs

    jid = demo_jobs.record.perform_async("stays")
    r.set(keys.CANCELS, "not a zset")
    with pytest.raises(cogworker.WrongTypeKey, match=keys.CANCELS):
        cogworker.cancel(jid)
    assert r.llen(keys.queue("default")) == 1


def test_fake_mode_drops_the_recorded_job() -> None:
    import demo_jobs

    with testing.fake():
        keep = demo_jobs.record.perform_async("a")
        jid = demo_jobs.record.perform_async("b")
        assert cogworker.cancel(jid).case == "queued"
        assert [job["jid"] for job in demo_jobs.record.jobs] == [keep]
        assert cogworker.cancel(jid).case == "not_found"


def test_current_job_outside_a_job_is_an_error_and_inside_one_names_it() -> None:
    with pytest.raises(RuntimeError, match="only available while a job runs"):
        cogworker.current_job()
    seen: list[object] = []

    @cogworker.job(name="test_cancel.looks")
    def looks() -> None:
        job = cogworker.current_job()
        job.raise_if_cancelled()  # not cancelled: returns
        seen.append((job.jid, job.queue, job.name, job.cancelled))

    with testing.inline():
        jid = looks.perform_async()
    assert seen == [(jid, "default", "test_cancel.looks", False)]
