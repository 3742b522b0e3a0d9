"""`cogworker queue pause NAME`: no process fetches from a paused queue, by any path (the fetch
script, the one-queue BLMOVE wait, basic fetch's BRPOP), including a pause that arrives while a
worker is blocked on the queue; a resume starts its jobs promptly."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.ops import queues as queue_ops
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import Worker, WorkerPool

QUICK = {"COGWORKER_CONCURRENCY": "2", "COGWORKER_HEARTBEAT_INTERVAL_S": "0.2"}


@pytest.fixture
def basic_redis() -> Iterator[RedisServer]:
    """A server without LMOVE/BLMOVE: workers fall back to basic fetch (BRPOP)."""
    server = RedisServer(extra=("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", ""))
    try:
        yield server
    finally:
        server.close()


def looks(r: redis.Redis) -> int:
    """How often the paused set has been read (Redis counts the commands scripts run too): every
    fetch reads it, so this counts a worker's looks at its queues (plus the odd key guard pass)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("smembers", "sismember"))


def identity_of(worker: Worker) -> str:
    ready = wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="the worker")
    return str(ready[0]["identity"])


def blocked_on(r: redis.Redis, command: str) -> bool:
    return any(c.get("cmd") == command and c.get("flags") == "b" for c in r.client_list())


def idle(r: redis.Redis, identity: str) -> bool:
    return r.hget(keys.process(identity), "busy") in (None, "0")


def on_hand(r: redis.Redis, identity: str, queue: str) -> int:
    """Jobs on the queue or on the worker's in-progress list, read in one atomic step."""
    pipe = r.pipeline(transaction=True)
    pipe.llen(keys.queue(queue))
    pipe.llen(keys.in_progress(identity))
    waiting, taken = pipe.execute()
    return int(waiting) + int(taken)


def assert_nothing_runs_while_the_worker_looks(
    r: redis.Redis, identity: str, queue: str, count: int, times: int = 3
) -> None:
    """Until the worker has looked at its queues `times` more times, no pushed job starts and the
    worker stays idle. A job taken as the pause landed may be on its way back for a moment (with
    basic fetch, only in the worker's memory), so the queue must hold all of them again at the end."""
    first = looks(r)

    def looked_enough() -> bool:
        assert r.llen("test:ran") == 0
        assert idle(r, identity)
        assert on_hand(r, identity, queue) <= count
        return looks(r) - first >= times

    wait_until(looked_enough, timeout=15, interval=0.005, message=f"{times} looks at the queues")
    wait_until(lambda: r.llen(keys.queue(queue)) == count, timeout=5, message=f"{count} jobs queued")
    assert r.llen("test:ran") == 0


def push_and_check_paused(
    r: redis.Redis, identity: str, push: Callable[[], None], queue: str = "default", count: int = 5
) -> None:
    # Jobs run before (another queue's, or before a pause) no longer show in the heartbeat, and are
    # acknowledged: an idle worker's acknowledgement goes with its next look (within a second), so
    # until then a finished job is still on its in-progress list and `on_hand` would count it.
    wait_until(lambda: idle(r, identity), timeout=5, message="an idle heartbeat")
    wait_until(
        lambda: r.llen(keys.in_progress(identity)) == 0, timeout=5, message="earlier jobs acknowledged"
    )
    push()
    assert_nothing_runs_while_the_worker_looks(r, identity, queue, count)
    began = time.monotonic()
    queue_ops.resume(r, queue)
    wait_until(lambda: r.llen("test:ran") == count, timeout=10, message="the resumed jobs")
    # Promptly: a resume is noticed at the worker's next look, not after a long back-off.
    assert time.monotonic() - began < 3


def push_five() -> None:
    for i in range(5):
        demo_jobs.record.perform_async(f"p{i}")


@pytest.mark.parametrize("when", ["before-start", "while-blocked"])
def test_one_queue_worker_fetches_nothing_from_its_paused_queue(
    r: redis.Redis, configured: object, workers: WorkerPool, when: str
) -> None:
    """The default setup (one queue): the idle path's BLMOVE must not take from a paused queue,
    neither when the pause came first nor when it lands while the BLMOVE is blocked."""
    if when == "before-start":
        queue_ops.pause(r, "default")
    worker = workers.start(**QUICK)
    identity = identity_of(worker)
    if when == "while-blocked":
        wait_until(lambda: blocked_on(r, "blmove"), timeout=15, message="a thread blocked on the queue")
        queue_ops.pause(r, "default")
    push_and_check_paused(r, identity, push_five)
    assert_stopped_listening(r)
    assert worker.stop() == 0


def assert_stopped_listening(r: redis.Redis) -> None:
    """Resumed, a one-queue worker blocks on the queue again: it drops the wake-up channel it
    listened to while paused (unread messages would pile up in Redis until it cut the connection)."""
    wait_until(
        lambda: r.pubsub_numsub(keys.WAKE_CHANNEL) == [(keys.WAKE_CHANNEL, 0)],
        timeout=5,
        message="the wake-up subscription to end",
    )


def test_several_queues_skip_the_paused_one_and_serve_the_others(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    queue_ops.pause(r, "default")
    worker = workers.start(COGWORKER_QUEUES="default,other", **QUICK)
    identity = identity_of(worker)
    demo_jobs.on_other.perform_async("served")
    wait_until(lambda: r.lrange("test:ran", 0, -1) == ["other:served"], timeout=10, message="the other queue")
    r.delete("test:ran")
    push_and_check_paused(r, identity, push_five)
    # Every queue paused: nothing is fetched either, and a resume starts the jobs at once.
    queue_ops.pause(r, "default")
    queue_ops.pause(r, "other")
    r.delete("test:ran")
    push_and_check_paused(r, identity, push_five)
    assert worker.stop() == 0


def test_basic_fetch_fetches_nothing_from_a_paused_queue(
    basic_redis: RedisServer, workers: WorkerPool
) -> None:
    """Basic fetch (BRPOP, Redis without LMOVE): a pause landing while BRPOP is blocked."""
    cogworker.configure(load_settings(redis_url=basic_redis.url))
    r = basic_redis.client()
    worker = workers.start(basic_redis.url, **QUICK)
    identity = identity_of(worker)
    wait_until(lambda: blocked_on(r, "brpop"), timeout=15, message="a fetcher blocked on the queue")
    queue_ops.pause(r, "default")
    push_and_check_paused(r, identity, push_five)
    assert_stopped_listening(r)
    assert worker.stop() == 0
