"""Unique jobs against a real Redis: claims, duplicates, releases, races, outages, testing modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
import redis
import unique_jobs

import cogworker
from cogworker import testing
from cogworker.api import client as cw_client
from cogworker.api.unique import deferred_releases, release_when_done, retry_deferred_releases
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.store.locks import unique_digest
from tests.support.inproc import Runner
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


@pytest.fixture(autouse=True)
def _jobs_see_the_test_redis(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_server.url)


def lock_key(fn: Any, *args: Any, queue: str | None = None) -> str:
    job = {"class": fn.name, "queue": queue or fn.queue, "args": list(args), "kwargs": {}}
    return keys.unique(unique_digest(job))


def payloads(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(key, 0, -1)]


def test_a_duplicate_push_returns_none_until_the_job_has_run(r: redis.Redis, configured: Settings) -> None:
    jid = unique_jobs.rebuild.perform_async(1)
    assert jid is not None
    assert r.get(lock_key(unique_jobs.rebuild, 1)) == jid
    assert 3590_000 < r.pttl(lock_key(unique_jobs.rebuild, 1)) <= 3600_000  # settings.unique_ttl_s
    assert unique_jobs.rebuild.perform_async(1) is None
    assert unique_jobs.rebuild.perform_in(30, 1) is None
    # Other arguments, or another queue, are other jobs.
    assert unique_jobs.rebuild.perform_async(2) is not None
    assert unique_jobs.rebuild.set(queue="other").perform_async(1) is not None
    assert r.llen("cogworker:queue:default") == 2

    runner = Runner(configured)
    assert runner.run_next()  # rebuild(1): done, so its claim is given back
    assert r.get(lock_key(unique_jobs.rebuild, 1)) is None
    assert r.lrange("test:ran", 0, -1) == ["rebuild 1"]
    assert unique_jobs.rebuild.perform_async(1) is not None


def test_unique_for_limits_the_claim(r: redis.Redis, configured: Settings) -> None:
    unique_jobs.rebuild_for_a_minute.perform_async(3)
    assert 55_000 < r.pttl(lock_key(unique_jobs.rebuild_for_a_minute, 3)) <= 60_000


def test_a_job_scheduled_beyond_its_limit_keeps_its_claim_until_it_is_due(
    r: redis.Redis, configured: Settings
) -> None:
    jid = unique_jobs.rebuild_for_a_minute.perform_in(7200, 4)
    assert jid is not None
    ttl_ms = r.pttl(lock_key(unique_jobs.rebuild_for_a_minute, 4))
    assert 7200_000 + 55_000 < ttl_ms <= 7200_000 + 60_000
    assert unique_jobs.rebuild_for_a_minute.perform_async(4) is None
    assert r.zcard("cogworker:schedule") == 1


def test_push_bulk_gives_none_where_a_job_is_a_duplicate(r: redis.Redis, configured: Settings) -> None:
    held = unique_jobs.rebuild.perform_async(2)
    jids = cogworker.push_bulk(unique_jobs.rebuild, [(1,), (2,), (1,), (3,)])
    assert held is not None
    assert jids[0] is not None and jids[3] is not None
    assert jids[1] is None and jids[2] is None
    queued = {p["jid"]: p["args"] for p in payloads(r, "cogworker:queue:default")}
    assert queued == {held: [2], jids[0]: [1], jids[3]: [3]}


def test_a_push_that_fails_gives_its_claim_back(private_redis: RedisServer) -> None:
    settings = load_settings(redis_url=private_redis.url)
    cw_client.configure(settings)
    r = private_redis.client()
    r.set("cogworker:queue:default", "a string, not a list")  # the push itself fails (WRONGTYPE)
    with pytest.raises(redis.ResponseError):
        unique_jobs.rebuild.perform_async(9)
    with pytest.raises(redis.ResponseError):
        cogworker.push_bulk(unique_jobs.rebuild, [(9,), (10,)])
    assert r.keys("cogworker:unique:*") == []
    r.delete("cogworker:queue:default")
    assert unique_jobs.rebuild.perform_async(9) is not None


def test_pushes_racing_from_threads_let_one_copy_in(r: redis.Redis, configured: Settings) -> None:
    barrier = threading.Barrier(16)
    results: list[str | None] = []
    lock = threading.Lock()

    def push() -> None:
        barrier.wait()
        jid = unique_jobs.rebuild.perform_async(42)
        with lock:
            results.append(jid)

    threads = [threading.Thread(target=push) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [jid for jid in results if jid is not None]
    assert len(results) == 16 and len(winners) == 1
    assert r.llen("cogworker:queue:default") == 1
    assert r.get(lock_key(unique_jobs.rebuild, 42)) == winners[0]


PUSHER = """
import os, sys, redis, unique_jobs, cogworker
cogworker.configure()
r = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"])
r.blpop("test:go", timeout=20)
print("result", unique_jobs.rebuild.perform_async(7), flush=True)
"""


def test_pushes_racing_from_processes_let_one_copy_in(redis_server: RedisServer, r: redis.Redis) -> None:
    env = dict(os.environ, COGWORKER_REDIS_URL=redis_server.url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PUSHER], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        for _ in range(4)
    ]
    try:
        wait_until(
            lambda: sum(c["cmd"] == "blpop" for c in r.client_list()) == 4,
            timeout=20,
            message="pushers ready",
        )
        r.rpush("test:go", *["go"] * 4)
        outputs = [p.communicate(timeout=20)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs)
    results = [line.split()[1] for out in outputs for line in out.splitlines() if line.startswith("result ")]
    assert sorted(result == "None" for result in results) == [False, True, True, True]
    assert r.llen("cogworker:queue:default") == 1


def test_the_claim_is_kept_through_retries_and_given_back_when_the_job_dies(
    r: redis.Redis, configured: Settings
) -> None:
    jid = unique_jobs.flaky.perform_async("x")  # retry=2
    key = lock_key(unique_jobs.flaky, "x")
    runner = Runner(configured)
    for retry_count in (0, 1):
        assert runner.run_next()
        assert r.zcard("cogworker:retry") == 1
        assert json.loads(r.zrange("cogworker:retry", 0, -1)[0])["retry_count"] == retry_count
        assert r.get(key) == jid  # still pending: a duplicate would run alongside its retry
        assert unique_jobs.flaky.perform_async("x") is None
        assert runner.make_retries_due() == 1
    assert runner.run_next()
    assert r.zcard("cogworker:dead") == 1
    assert r.get(key) is None
    assert unique_jobs.flaky.perform_async("x") is not None


def test_a_job_without_retries_gives_its_claim_back_when_it_fails(
    r: redis.Redis, configured: Settings
) -> None:
    unique_jobs.fails_for_good.perform_async("y")
    assert Runner(configured).run_next()
    assert r.zcard("cogworker:dead") == 1
    assert r.get(lock_key(unique_jobs.fails_for_good, "y")) is None


def test_a_release_never_frees_a_newer_copys_claim(r: redis.Redis, configured: Settings) -> None:
    key = lock_key(unique_jobs.rebuild, 5)
    old = unique_jobs.rebuild.perform_async(5)
    r.delete(key)  # the claim expired (a job that waited longer than its limit)...
    new = unique_jobs.rebuild.perform_async(5)  # ...and a newer copy took it
    assert old is not None and new is not None and old != new
    runner = Runner(configured)
    assert runner.run_next()  # the old copy finishes: the claim is the new copy's, and stays
    assert r.get(key) == new
    assert unique_jobs.rebuild.perform_async(5) is None
    assert runner.run_next()
    assert r.get(key) is None


def test_a_poison_pill_filed_in_dead_by_recovery_gives_its_claim_back(
    r: redis.Redis, configured: Settings
) -> None:
    jid = unique_jobs.kill_me.perform_async("p")
    key = lock_key(unique_jobs.kill_me, "p")
    assert r.get(key) == jid
    # Its process died running it max_orphanings times already; this is the next death.
    r.lmove("cogworker:queue:default", "cogworker:inprogress:gone:1:1", "RIGHT", "LEFT")
    r.set(f"cogworker:orphanings:{jid}", configured.max_orphanings)
    runner = Runner(configured)
    result = runner.parts.recovery.requeue("gone:1:1", if_dead_for=None, count_orphans=True)
    assert len(result.buried) == 1
    dead = json.loads(r.zrange("cogworker:dead", 0, -1)[0])
    assert dead["jid"] == jid and dead["error_class"] == "cogworker.ProcessDied"
    assert r.get(key) is None
    assert unique_jobs.kill_me.perform_async("p") is not None


def test_a_release_that_fails_is_retried_later(private_redis: RedisServer) -> None:
    settings = load_settings(redis_url=private_redis.url)
    cw_client.configure(settings)
    jid = unique_jobs.rebuild.perform_async(11)
    assert jid is not None
    key = lock_key(unique_jobs.rebuild, 11)
    payload = json.loads(private_redis.client().lrange("cogworker:queue:default", 0, -1)[0])

    # The job runs while Redis goes away: its release can't be made now.
    release_when_done(payload, private_redis.stop)
    assert deferred_releases() == 1
    assert retry_deferred_releases() is None and deferred_releases() == 1  # still away: kept

    private_redis.start()  # (nothing on disk: put the claim back as it was)
    r = private_redis.client()
    r.set(key, jid)
    r.set("cogworker:unique:someone-elses", "another-jid")
    retry_deferred_releases()
    assert deferred_releases() == 0
    assert r.get(key) is None
    assert r.get("cogworker:unique:someone-elses") == "another-jid"
    assert retry_deferred_releases() == "skipped"


def test_testing_modes_take_no_claims_and_need_no_redis() -> None:
    # A Redis nobody listens on: any command would fail.
    cw_client.configure(load_settings(redis_url="redis://127.0.0.1:1/0"))
    with testing.fake():
        assert unique_jobs.rebuild.perform_async(1) is not None
        assert unique_jobs.rebuild.perform_async(1) is not None
        assert cogworker.push_bulk(unique_jobs.rebuild, [(1,), (1,)]) != [None, None]
        assert len(unique_jobs.rebuild.jobs) == 4
        unique_jobs.rebuild.clear()
    with testing.inline(), pytest.raises(RuntimeError, match="no retries"):
        unique_jobs.fails_for_good.perform_async("inline")


def test_workers_run_each_unique_job_once_and_free_every_claim(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    pushed = [unique_jobs.rebuild.perform_async(i % 10) for i in range(30)]
    assert sum(jid is not None for jid in pushed) == 10
    started = [workers.start(COGWORKER_REQUIRE="unique_jobs", COGWORKER_CONCURRENCY="4") for _ in range(2)]
    wait_until(lambda: r.llen("test:ran") == 10, timeout=20, message="10 runs")
    wait_until(lambda: r.keys("cogworker:unique:*") == [], timeout=10, message="every claim given back")
    assert sorted(r.lrange("test:ran", 0, -1)) == sorted(f"rebuild {i}" for i in range(10))
    assert unique_jobs.rebuild.perform_async(0) is not None
    wait_until(lambda: r.llen("test:ran") == 11, timeout=10, message="the new copy to run")
    for worker in started:
        wait_until(lambda w=worker: w.events_named("worker_ready"), timeout=15, message="ready")
        assert worker.stop() == 0
