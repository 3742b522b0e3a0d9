"""A Redis that refuses LMOVE/BLMOVE (renamed commands, an ACL user without them): a worker falls back
to basic fetch (BRPOP) whatever the number of queues it reads, runs every job, and never takes the
refusal for a queue of the wrong type. A fallback while long jobs fetched before it run: those jobs
are acknowledged on the in-progress list they were fetched onto, so neither a clean stop nor a
SIGKILL and recovery leaves them there to run again."""

from __future__ import annotations

import collections.abc

import demo_jobs
import pytest
import redis

import cogworker
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import Worker, WorkerPool

RENAMED = ("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", "")
QUEUE_SETS = [pytest.param("q1", id="one-queue"), pytest.param("q1,q2,q3", id="three-queues")]

# Recovery within seconds, and a poller that looks often.
QUICK = {**QUICK_RECOVERY, "COGWORKER_POLL_INTERVAL_S": "0.2"}


@pytest.fixture
def server() -> collections.abc.Iterator[RedisServer]:
    """A private server, whose default user is the test's (it pushes and reads as that user)."""
    made = RedisServer()
    cogworker.configure(load_settings(redis_url=made.url))
    try:
        yield made
    finally:
        made.close()


def acl_user(server: RedisServer, *rules: str) -> str:
    """An ACL user `w` with every command and key but `rules` taken away; its URL."""
    server.client().acl_setuser(
        "w",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        categories=["+@all"],
        commands=list(rules),
    )
    return f"redis://w:pw@127.0.0.1:{server.port}/0"


def push(queues: str, count: int, tag: str) -> None:
    """`count` record jobs, spread over the queues."""
    names = queues.split(",")
    for i in range(count):
        demo_jobs.record.set(queue=names[i % len(names)]).perform_async(f"{tag}{i}")


def ran(r: redis.Redis) -> list[str]:
    return [line.split()[0] for line in r.lrange("test:ran", 0, -1)]


def assert_no_wrong_type(r: redis.Redis, worker: Worker) -> None:
    assert worker.events_named("queue_key_has_wrong_type") == []
    assert worker.events_named("wrong_type_key_quarantined") == []
    assert list(r.scan_iter(match=keys.QUARANTINE_PREFIX + "*")) == []


@pytest.mark.parametrize("queues", QUEUE_SETS)
def test_renamed_commands_fall_back_and_every_job_runs(workers: WorkerPool, queues: str) -> None:
    renamed = RedisServer(extra=RENAMED)
    try:
        cogworker.configure(load_settings(redis_url=renamed.url))
        r = renamed.client()
        push(queues, 6, "early")
        worker = workers.start(renamed.url, COGWORKER_QUEUES=queues, COGWORKER_CONCURRENCY="2")
        wait_until(lambda: len(ran(r)) == 6, timeout=30, message="the jobs on basic fetch")
        push(queues, 3, "later")
        wait_until(lambda: len(ran(r)) == 9, timeout=30, message="the later jobs")
        [fallback] = worker.events_named("reliable_fetch_unsupported")
        assert "unknown" in fallback["error"].lower()
        assert_no_wrong_type(r, worker)
        assert worker.stop() == 0
        assert r.get(keys.STAT_PROCESSED) == "9"
    finally:
        renamed.close()


@pytest.mark.parametrize("queues", QUEUE_SETS)
def test_an_acl_user_without_lmove_falls_back_and_every_job_runs(
    server: RedisServer, workers: WorkerPool, queues: str
) -> None:
    """Only LMOVE is refused (BLMOVE is allowed): the fetch script's refusal alone falls back."""
    url = acl_user(server, "-lmove")
    r = server.client()
    push(queues, 6, "early")
    worker = workers.start(url, COGWORKER_QUEUES=queues, COGWORKER_CONCURRENCY="2")
    wait_until(lambda: len(ran(r)) == 6, timeout=30, message="the jobs")
    [fallback] = wait_until(lambda: worker.events_named("reliable_fetch_unsupported"), timeout=10)
    assert "can't run this command" in fallback["error"]
    assert_no_wrong_type(r, worker)
    assert r.scard(keys.GUARD_REQUESTS) == 0  # nobody asked the key guard to move a queue
    assert worker.stop() == 0


def start_long_jobs(server: RedisServer, workers: WorkerPool, queues: str) -> tuple[redis.Redis, Worker]:
    """A reliable worker (three threads) running two long jobs fetched onto its list; then LMOVE and
    BLMOVE are taken from its user, and a short job pushed: the worker falls back while they run, and
    they end after it."""
    url = acl_user(server)
    r = server.client()
    names = queues.split(",")
    for i in range(2):
        demo_jobs.held.set(queue=names[i % len(names)]).perform_async(f"long{i}")
    worker = workers.start(url, COGWORKER_QUEUES=queues, COGWORKER_CONCURRENCY="3", **QUICK)
    listed = keys.in_progress(worker.identity())
    wait_until(lambda: r.llen("test:started") == 2, timeout=30, message="the long jobs started")
    assert r.llen(listed) == 2  # fetched reliably, onto the list
    server.client().acl_setuser("w", enabled=True, commands=["-lmove", "-blmove"])
    push(queues, 1, "short")
    wait_until(lambda: worker.events_named("reliable_fetch_unsupported"), timeout=30, message="fallback")
    wait_until(lambda: ran(r) == ["short0"], timeout=30, message="the short job")
    # The short job acknowledged: the long ones are left.
    wait_until(lambda: r.llen(listed) == 2, timeout=15, message="the short job acknowledged")
    r.rpush("test:release", "go", "go")
    wait_until(lambda: len(ran(r)) == 3, timeout=30, message="every job ran")
    return r, worker


@pytest.mark.parametrize("queues", QUEUE_SETS)
def test_jobs_fetched_before_a_fallback_are_acknowledged_on_their_list_and_a_stop_leaves_it_empty(
    server: RedisServer, workers: WorkerPool, queues: str
) -> None:
    r, worker = start_long_jobs(server, workers, queues)
    identity = worker.identity()
    listed = keys.in_progress(identity)
    wait_until(lambda: r.llen(listed) == 0, timeout=15, message="the long jobs acknowledged on the list")
    assert worker.stop() == 0
    assert r.llen(listed) == 0 and not r.sismember(keys.IN_PROGRESS_IDENTITIES, identity)
    assert r.get(keys.STAT_PROCESSED) == "3"
    assert sorted(ran(r)) == ["long0", "long1", "short0"]


def test_jobs_finished_after_a_fallback_do_not_run_again_after_a_sigkill(
    server: RedisServer, workers: WorkerPool
) -> None:
    queues = "q1,q2,q3"
    r, worker = start_long_jobs(server, workers, queues)
    identity = worker.identity()
    wait_until(lambda: r.get(keys.STAT_PROCESSED) == "3", timeout=15, message="the three counted")
    worker.kill()  # SIGKILL, its whole session
    server.client().acl_setuser("w", enabled=True, commands=["+lmove", "+blmove"])
    rescuer = workers.start(acl_user(server), COGWORKER_QUEUES=queues, **QUICK)
    # Recovery has taken the dead process's list once its identity is no longer registered.
    wait_until(lambda: not r.sismember(keys.IN_PROGRESS_IDENTITIES, identity), timeout=30, message="recovery")
    push(queues, 1, "after")
    wait_until(lambda: "after0" in ran(r), timeout=30, message="a job after the recovery")
    assert r.llen("test:started") == 2, "a long job that had finished ran again"
    assert sum(r.llen(keys.queue(q)) for q in queues.split(",")) == 0
    rescuer_list = keys.in_progress(rescuer.identity())
    wait_until(lambda: r.llen(rescuer_list) == 0, timeout=15, message="the rescuer's acks")
    assert sorted(ran(r)) == ["after0", "long0", "long1", "short0"]
    assert rescuer.stop() == 0
