"""worker/running/cancelled.py's CancelWatch and api/current_job.py against a real Redis: the first read takes
the whole cancel record, later reads only what is new (entries already known are not handed over
again), a running job is flagged when its cancel is read and a job beginning after it starts
flagged, an async job's callback runs once, and a record of the wrong type is reported and the
key guard asked, with the watch still alive."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cogworker.api import current_job
from cogworker.ops import cancel as cancel_ops
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.store.redis_context import RedisContext
from cogworker.worker.running.cancelled import CancelWatch


@pytest.fixture(autouse=True)
def _forget_cancels() -> Iterator[None]:
    current_job.forget_before(float("inf"))
    yield
    current_job.forget_before(float("inf"))


def test_reads_everything_first_then_only_what_is_new(r: redis.Redis, settings: Settings) -> None:
    ctx = RedisContext.build(settings)
    for jid in ("old1", "old2"):
        cancel_ops.record(ctx.client, ctx.scripts, jid)
    watch = CancelWatch(ctx)
    assert watch.read() == 2
    assert current_job.known_cancelled("old1") and current_job.known_cancelled("old2")
    assert watch.read() == 0  # the slack re-reads recent entries, but they are known already
    cancel_ops.record(ctx.client, ctx.scripts, "new1")
    assert watch.read() == 1
    assert current_job.known_cancelled("new1") and not current_job.known_cancelled("other")


def test_a_running_job_is_flagged_and_a_later_one_starts_flagged(r: redis.Redis, settings: Settings) -> None:
    ctx = RedisContext.build(settings)
    watch = CancelWatch(ctx)
    watch.read()
    job, token = current_job.begin("run1", "default", "demo_jobs.record")
    calls: list[str] = []
    job.on_cancel(lambda: calls.append("cancelled"))
    try:
        assert current_job.current_job() is job and not job.cancelled
        job.raise_if_cancelled()
        cancel_ops.record(ctx.client, ctx.scripts, "run1")
        watch.read()
        assert job.cancelled and calls == ["cancelled"]
        with pytest.raises(current_job.JobCancelled, match="run1"):
            job.raise_if_cancelled()
        job.cancel()  # a second cancel runs no callback again
        assert calls == ["cancelled"]
    finally:
        current_job.end(job, token)
    with pytest.raises(RuntimeError):
        current_job.current_job()
    again, token = current_job.begin("run1", "default", "demo_jobs.record")
    try:
        assert again.cancelled  # known before it began: it must not start
        late: list[str] = []
        again.on_cancel(lambda: late.append("at once"))
        assert late == ["at once"]
    finally:
        current_job.end(again, token)


def test_a_record_of_the_wrong_type_is_reported_and_the_guard_asked(
    r: redis.Redis, settings: Settings
) -> None:
    ctx = RedisContext.build(settings)
    r.set(keys.CANCELS, "not a zset")
    watch = CancelWatch(ctx)
    assert watch.read_guarded() is False  # reported (redis_command_failed), not raised
    assert keys.CANCELS in r.smembers(keys.GUARD_REQUESTS)
    r.delete(keys.CANCELS)
    assert watch.read_guarded() is True
