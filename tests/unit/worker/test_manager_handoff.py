"""The Manager's hand-offs, in this process, against the real test Redis.

The manager runs its real fetcher thread and job threads over a real reliable fetch; only what a job
thread runs is the test's (the `run_job` seam), so a test can hold threads busy and see which thread
ran what. The fetcher is a ReliableFetch that also records what passed through it (which thread a
blocking wait delivered a job to, how many jobs each fetch asked for), and can hold a blocking wait's
reply back, as a slow network would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.api import payload
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.store.connection import connect
from cogworker.store.redis_context import RedisContext
from cogworker.worker.fetching.fetch import FetchResult, Waited, Work
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.manager import Manager
from cogworker.worker.running.processor import Stats
from cogworker.worker.settling.settle import Settler
from tests.support.redis_server import RedisServer, wait_until

QUEUE = keys.queue("default")
IDENTITY = "test:handoff:0"
IN_PROGRESS = keys.in_progress(IDENTITY)


class RecordingFetch(ReliableFetch):
    """A real reliable fetch that notes what went through it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: list[int] = []
        self.fetched: list[str] = []
        self.waiting = threading.Event()  # a thread is inside a blocking wait
        self.delivered_to: dict[str, str] = {}  # raw -> the thread whose wait brought it
        self.reply_gate = threading.Event()  # cleared: a wait that got a job holds it back
        self.reply_gate.set()
        self.reply_held = threading.Event()

    def fetch(self, limit: int, acks: list[tuple[str, str]]) -> FetchResult:
        result = super().fetch(limit, acks)
        if limit:
            self.limits.append(limit)
        self.fetched += [work.raw for work in result.works]
        return result

    def wait(self, timeout_s: float) -> Waited:
        self.waiting.set()
        waited = super().wait(timeout_s)
        if waited.work is not None:
            self.delivered_to[waited.work.raw] = threading.current_thread().name
            self.reply_held.set()
            self.reply_gate.wait(timeout=10)
        return waited


@dataclass
class JobThreads:
    """The test's job runner: records which thread ran which job; `gate` holds every job."""

    gate: threading.Event = field(default_factory=threading.Event)
    ran: dict[str, str] = field(default_factory=dict)
    settler: Settler | None = None
    ack_first: bool = False

    def __call__(self, work: Work) -> None:
        self.ran[work.raw] = threading.current_thread().name
        if self.ack_first and self.settler is not None:
            self.settler.ack(work.raw, "jid")
        self.gate.wait(timeout=10)


@dataclass
class Rig:
    manager: Manager
    fetcher: RecordingFetch
    jobs: JobThreads


@pytest.fixture
def rig(redis_server: RedisServer, r: redis.Redis, request: pytest.FixtureRequest) -> Iterator[Rig]:
    concurrency = getattr(request, "param", 2)
    settings = load_settings(redis_url=redis_server.url, concurrency=concurrency)
    ctx = RedisContext.build(settings)
    fetcher = RecordingFetch(
        ctx.client, connect(settings, extra_timeout_s=2.0), ctx.scripts, IDENTITY, settings.queue_spec
    )
    settler = Settler(ctx, fetcher.in_progress_key)
    jobs = JobThreads(settler=settler)
    manager = Manager(ctx, fetcher, settler, Stats(), run_job=jobs)
    rig = Rig(manager, fetcher, jobs)
    try:
        yield rig
    finally:
        jobs.gate.set()
        fetcher.reply_gate.set()
        manager.stop(time.monotonic() + 5)


def push(r: redis.Redis, *args: object) -> list[str]:
    raws = [
        codec.dumps(payload.build("demo_jobs.record", [arg], {}, queue="default", retry=True)) for arg in args
    ]
    r.lpush(QUEUE, *raws)
    return raws


@pytest.mark.parametrize("rig", [2], indirect=True)
def test_fetches_only_as_many_jobs_as_there_are_free_threads(rig: Rig, r: redis.Redis) -> None:
    push(r, 1, 2, 3, 4, 5)
    rig.manager.start()
    wait_until(lambda: len(rig.jobs.ran) == 2, timeout=5, message="both threads running a job")
    # The other three stay on the queue, where another process could take them.
    assert r.llen(QUEUE) == 3
    assert r.llen(IN_PROGRESS) == 2
    assert rig.fetcher.limits and max(rig.fetcher.limits) <= 2
    assert len(rig.fetcher.fetched) == 2
    rig.jobs.gate.set()
    wait_until(lambda: len(rig.jobs.ran) == 5, timeout=5, message="every job run")


@pytest.mark.parametrize("rig", [2], indirect=True)
def test_the_one_queue_wait_turn_goes_to_an_idle_thread_which_runs_the_job(rig: Rig, r: redis.Redis) -> None:
    rig.manager.start()
    assert rig.fetcher.waiting.wait(timeout=5), "an idle thread blocks on the queue"
    (raw,) = push(r, "hello")
    wait_until(lambda: raw in rig.jobs.ran, timeout=5, message="the pushed job run")
    # Run by the thread whose blocking wait brought it, not fetched and handed to another thread.
    assert rig.fetcher.delivered_to[raw] == rig.jobs.ran[raw]
    assert rig.jobs.ran[raw].startswith("job-")
    assert raw not in rig.fetcher.fetched
    assert r.lrange(IN_PROGRESS, 0, -1) == [raw]


@pytest.mark.parametrize("rig", [1], indirect=True)
def test_quiet_during_a_blocking_wait_gives_the_job_back_unstarted(rig: Rig, r: redis.Redis) -> None:
    rig.fetcher.reply_gate.clear()
    rig.manager.start()
    assert rig.fetcher.waiting.wait(timeout=5), "the idle thread blocks on the queue"
    (raw,) = push(r, "late")
    assert rig.fetcher.reply_held.wait(timeout=5), "the wait got the job"
    rig.manager.quiet()  # arrives while the job is on its way to the thread
    rig.fetcher.reply_gate.set()
    wait_until(lambda: r.lrange(QUEUE, 0, -1) == [raw], timeout=5, message="the job back on its queue")
    assert r.llen(IN_PROGRESS) == 0
    assert rig.jobs.ran == {}


@pytest.mark.parametrize("rig", [1], indirect=True)
def test_stop_waits_for_the_wait_turn_to_give_its_job_back(rig: Rig, r: redis.Redis) -> None:
    rig.fetcher.reply_gate.clear()
    rig.manager.start()
    assert rig.fetcher.waiting.wait(timeout=5), "the idle thread blocks on the queue"
    (raw,) = push(r, "racing the stop")
    assert rig.fetcher.reply_held.wait(timeout=5), "the wait got the job"
    left: list[list[Work]] = []
    # No time left to drain (the launcher's stop timeout has passed): the job threads aren't waited
    # for, but a thread inside the wait turn still is, briefly, for the job its wait may bring.
    stopping = threading.Thread(target=lambda: left.append(rig.manager.stop(time.monotonic())))
    stopping.start()
    wait_until(lambda: rig.manager.is_quiet, timeout=5, message="the stop begun")
    # Returning now would let the caller requeue while the thread still holds the job (or its
    # BLMOVE takes one of the requeued jobs just before exit).
    stopping.join(timeout=0.3)
    assert stopping.is_alive(), "stop returned while a thread still held a job from its wait"
    rig.fetcher.reply_gate.set()
    stopping.join(timeout=5)
    assert not stopping.is_alive()
    # By the time stop returns, the job is back on its queue, unstarted, and nothing is held.
    assert r.lrange(QUEUE, 0, -1) == [raw]
    assert r.llen(IN_PROGRESS) == 0
    assert left == [[]] and rig.jobs.ran == {}


@pytest.mark.parametrize("rig", [2], indirect=True)
def test_acks_are_flushed_while_every_thread_is_busy(rig: Rig, r: redis.Redis) -> None:
    rig.jobs.ack_first = True  # each job is acknowledged, then its thread stays busy
    push(r, 1, 2, 3)
    rig.manager.start()
    wait_until(lambda: len(rig.jobs.ran) == 2, timeout=5, message="both threads busy")
    # No thread comes free, so no fetch would carry the acks: they go on their own.
    wait_until(lambda: r.llen(IN_PROGRESS) == 0, timeout=3, message="the acks flushed")
    assert len(rig.jobs.ran) == 2
    assert r.llen(QUEUE) == 1
