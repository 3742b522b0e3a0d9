"""An `async def` job run on the worker's event loop from start to settle
(worker/running/async_process.py), against a real Redis: middleware of both kinds, status, unique,
retry, cancel and time limit behave as on the sync path, and a job that succeeds touches no thread
but the loop's."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import loop_jobs
import pytest
import redis

import cogworker
from cogworker import codec, server_chain
from cogworker.api import current_job
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.async_loop import AsyncLoop
from cogworker.worker.running.async_process import process_async
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.running.time_limits import TimeLimits
from cogworker.worker.settling.settle import Settler
from tests.support.components import build
from tests.support.redis_server import wait_until

IN_PROGRESS = keys.in_progress("inproc:0:0")


class LoopRunner:
    """One worker's loop, settler and counters; `run_next` runs a queued job as the Manager does."""

    def __init__(self, settings: Settings) -> None:
        self.parts = build(settings)
        self.settler = Settler(self.parts.ctx, IN_PROGRESS)
        self.stats = Stats()
        self.loop = AsyncLoop(5.0)
        self.limits = TimeLimits(None, 0.5)
        self.allowed = settings.require_modules

    def start_next(self) -> Any:
        raw = str(self.parts.client.lmove(keys.queue("default"), IN_PROGRESS, "RIGHT", "LEFT"))
        job = codec.loads_dict(raw)
        assert job is not None
        work = Work("default", raw)
        coro = process_async(
            work,
            job,
            self.settler,
            self.stats,
            allowed=self.allowed,
            loop=self.loop,
            limits=self.limits,
            slot=-1,
        )
        return asyncio.run_coroutine_threadsafe(coro, self.loop._ensure_started())

    def run_next(self) -> None:
        self.start_next().result(timeout=10)

    def close(self) -> None:
        self.limits.close()
        self.loop.close()


@pytest.fixture
def runner(configured: Settings) -> Iterator[LoopRunner]:
    loop_jobs.clear()
    found = LoopRunner(configured)
    yield found
    found.close()


# The two middleware of docs/guide/jobs.md ("Middleware"), as the page shows them.
current_tenant = loop_jobs.current_tenant
timings: list[tuple[str, float]] = []


def timed(job: dict[str, Any], call_next: Any) -> None:  # sync: call_next() runs the job
    started = time.perf_counter()
    try:
        call_next()
    finally:
        timings.append((job["class"], time.perf_counter() - started))


async def tenant(job: dict[str, Any], call_next: Any) -> None:  # async: await call_next()
    token = current_tenant.set(job["kwargs"].get("tenant", "none"))
    try:
        await call_next()
    finally:
        current_tenant.reset(token)


def test_the_guides_two_middleware_wrap_an_async_job(r: redis.Redis, runner: LoopRunner) -> None:
    timings.clear()
    cogworker.server_chain.add(timed)
    cogworker.server_chain.add(tenant)
    loop_jobs.for_tenant.perform_async("g1", tenant="acme")
    runner.run_next()
    assert loop_jobs.seen == [("g1", "async-loop", "acme")]
    [(name, seconds)] = timings
    assert name == "loop_jobs.for_tenant" and seconds > 0


def tenant_sync(job: dict[str, Any], call_next: Any) -> None:
    """A sync middleware, as users write them."""
    loop_jobs.seen.append(("sync-mw", threading.current_thread().name, ""))
    token = loop_jobs.current_tenant.set(f"sync-{job['args'][0]}")
    try:
        call_next()
    except ValueError as exc:
        loop_jobs.seen.append(("sync-mw-saw", str(exc), ""))
        raise
    finally:
        loop_jobs.current_tenant.reset(token)


async def tenant_async(job: dict[str, Any], call_next: Any) -> None:
    """An async middleware: on the loop around an async job, on a private loop around a sync one."""
    loop_jobs.seen.append(("async-mw", threading.current_thread().name, ""))
    token = loop_jobs.current_tenant.set(f"async-{job['args'][0]}")
    try:
        await call_next()
    finally:
        loop_jobs.current_tenant.reset(token)


def test_a_tracked_unique_job_runs_middleware_body_and_settle_on_the_loop(
    r: redis.Redis, runner: LoopRunner
) -> None:
    server_chain.add(tenant_async)
    jid = loop_jobs.tracked.perform_async("t1")
    assert jid is not None and loop_jobs.tracked.perform_async("t1") is None  # claimed
    threads_before = threading.active_count()
    runner.run_next()
    assert loop_jobs.seen == [("async-mw", "async-loop", ""), ("t1", "async-loop", "async-t1")]
    assert cogworker.status(jid) == "complete"
    assert loop_jobs.tracked.perform_async("t1") is not None  # the claim was released
    # Acknowledged on the loop: queued for the next fetch, counted.
    assert [j for _raw, j in runner.settler.take_acks()] == [jid]
    assert runner.stats.processed == 1 and runner.stats.failed == 0
    # The loop and its watchdog, and the unique release's one executor thread: no thread per job.
    assert threading.active_count() <= threads_before + 3


def test_a_sync_middleware_runs_on_a_bridge_thread_and_its_context_reaches_the_job(
    r: redis.Redis, runner: LoopRunner
) -> None:
    server_chain.add(tenant_sync)
    loop_jobs.tracked.perform_async("s1")
    runner.run_next()
    [(_, mw_thread, _), body] = loop_jobs.seen
    assert mw_thread.startswith("async-bridge")
    assert body == ("s1", "async-loop", "sync-s1")
    assert runner.stats.processed == 1


def test_a_failure_passes_through_both_kinds_of_middleware_and_is_filed_for_retry(
    r: redis.Redis, runner: LoopRunner
) -> None:
    server_chain.add(tenant_async)
    server_chain.add(tenant_sync)
    jid = loop_jobs.boom.perform_async("f1")
    runner.run_next()
    assert ("sync-mw-saw", "boom f1", "") in loop_jobs.seen
    [raw] = r.zrange(keys.RETRY, 0, -1)
    entry = json.loads(raw)
    assert (entry["jid"], entry["error_class"], entry["error_message"]) == (jid, "ValueError", "boom f1")
    assert cogworker.status(str(jid)) == "retrying"
    assert r.llen(IN_PROGRESS) == 0  # taken off the list by the filing
    assert runner.stats.failed == 1 and runner.stats.processed == 0


def test_a_cancel_ends_a_running_job_as_cancelled(r: redis.Redis, runner: LoopRunner) -> None:
    jid = str(loop_jobs.waits.perform_async("c1", 30))
    future = runner.start_next()
    assert loop_jobs.started.wait(5)
    current_job.note_cancelled([(jid, 0.0)])
    try:
        future.result(timeout=10)
    finally:
        current_job.forget_before(float("inf"))
    assert cogworker.status(jid) == "cancelled"
    assert [j for _raw, j in runner.settler.take_acks()] == [jid]
    assert r.zcard(keys.RETRY) == 0 and loop_jobs.seen == []
    assert runner.stats.failed == 0 and runner.stats.processed == 0


def test_a_job_past_its_time_limit_fails_with_job_timeout(r: redis.Redis, runner: LoopRunner) -> None:
    jid = loop_jobs.overruns.perform_async("l1")
    runner.run_next()
    [raw] = r.zrange(keys.RETRY, 0, -1)
    entry = json.loads(raw)
    assert (entry["jid"], entry["error_class"]) == (jid, "cogworker.api.time_limits.JobTimeout")
    assert runner.limits.armed == 0


def test_a_stop_gives_up_on_a_running_job_and_settles_nothing(r: redis.Redis, runner: LoopRunner) -> None:
    jid = str(loop_jobs.waits.perform_async("g1", 30))
    future = runner.start_next()
    assert loop_jobs.started.wait(5)
    assert runner.loop.cancel_all(grace_s=1.0) == 1
    with pytest.raises(TimeoutError):  # its task waits for good: never settled, never counted
        future.result(timeout=0.5)
    assert cogworker.status(jid) == "working"
    assert runner.settler.take_acks() == [] and r.zcard(keys.RETRY) == 0
    assert r.llen(IN_PROGRESS) == 1  # for the stop's requeue


def test_an_async_middleware_wraps_a_sync_job_on_its_thread(r: redis.Redis, runner: LoopRunner) -> None:
    server_chain.add(tenant_async)
    loop_jobs.plain.perform_async("p1")
    raw = str(r.lmove(keys.queue("default"), IN_PROGRESS, "RIGHT", "LEFT"))
    context = contextvars.Context()
    context.run(process, Work("default", raw), runner.settler, runner.stats, allowed=runner.allowed)
    assert loop_jobs.seen == [("async-mw", "MainThread", ""), ("p1", "MainThread", "async-p1")]
    assert runner.stats.processed == 1


def test_a_full_loop_refills_each_slot_as_its_job_ends(r: redis.Redis, runner: LoopRunner) -> None:
    """Many jobs in flight on one loop, no thread per job: all end, each counted once."""
    jids = [loop_jobs.waits.perform_async(f"m{n}", 0.01) for n in range(200)]
    futures = [runner.start_next() for _ in jids]
    for future in futures:
        future.result(timeout=20)
    wait_until(lambda: runner.stats.processed == 200, timeout=5, message="200 processed")
    assert sorted(j for _raw, j in runner.settler.take_acks()) == sorted(jids)
    assert {thread for _tag, thread, _ in loop_jobs.seen} == {"async-loop"}
