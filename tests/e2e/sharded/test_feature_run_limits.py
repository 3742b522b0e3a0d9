"""What bounds a run, in the sharded layout, on a real 3-master cluster with real sharded workers:
`expires_in` (a job fetched past its deadline is acknowledged unrun, counted `expired` in its own
partition: worker/running/processor.py, worker/settling/settle.py `end_unrun`), `async def` jobs (run and
settled on the worker's loop) and time limits (`timeout_s`, for a sync and an async job). A job's
acknowledgement or filing sent again is a no-op: tests/e2e/sharded/test_worker_replies.py."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import redis
import sharded_feature_jobs as fj

import cogworker
from cogworker import codec
from cogworker.store import keys, shards
from tests.e2e.sharded import feature_support
from tests.e2e.sharded.feature_support import (
    QUICK,
    lines,
    partition_of,
    queued_anywhere,
    shown_running,
    start,
    stat_sum,
    user_call,
)
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out


@pytest.mark.timeout(90)
def test_a_users_first_call_pushes_jobs_with_deadlines_and_a_sharded_worker_runs_only_the_live_ones(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    said = user_call(
        redis_cluster,
        f"""
        import sharded_feature_jobs as fj
        late = [fj.tracked.set(expires_in=0.5).perform_async({out!r}, f"late{{n}}") for n in range(4)]
        live = fj.tracked.set(expires_in=600).perform_async({out!r}, "live")
        print(live, *late)
        """,
    )
    live, *late = said.split()
    waiting = [
        codec.loads(raw) for p in feature_support.PARTS for raw in cluster.lrange(shards.queue_key(p), 0, -1)
    ]
    deadline = max(job["expires_at"] for job in waiting if job["jid"] in late)
    wait_until(lambda: time.time() > deadline, timeout=5, message="the short deadlines passed")
    start(workers, redis_cluster)
    wait_until(lambda: stat_sum(cluster, "expired") == 4, timeout=45, message="four counted expired")
    wait_until(lambda: cogworker.status(live) == "complete", timeout=30, message="the live one ran")
    assert lines(out, "ran") == Counter(["live"])
    assert all(cogworker.status(jid) == "expired" for jid in late)
    # Each counted in its own partition, none in the home slot.
    by_partition = Counter(partition_of(jid) for jid in late)
    assert all(int(cluster.get(shards.stat(p, "expired")) or 0) == n for p, n in by_partition.items())
    wait_until(lambda: queued_anywhere(cluster) == 0, timeout=10, message="nothing left")
    assert feature_support.jids_in(cluster, "dead") == [] and feature_support.jids_in(cluster, "retry") == []


@pytest.mark.timeout(90)
def test_a_users_first_call_waits_for_an_async_jobs_result_and_for_time_limited_jobs_failures(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    start(workers, redis_cluster)
    said = user_call(
        redis_cluster,
        f"""
        import cogworker, sharded_feature_jobs as fj
        print(cogworker.result(fj.async_add.perform_async(2, 40), timeout=40))
        for job in (fj.too_slow, fj.async_too_slow):
            jid = job.perform_async({out!r}, job.name)
            try:
                cogworker.result(jid, timeout=40)
            except cogworker.JobFailed as exc:
                print(exc.error_class)
        """,
        timeout=90,
    )
    answer, *errors = said.splitlines()
    assert answer == "42"
    assert len(errors) == 2 and all(error.endswith("JobTimeout") for error in errors), errors
    assert lines(out, "started") == Counter([fj.too_slow.name, fj.async_too_slow.name])
    assert lines(out, "ran") == Counter()  # both stopped at their limit
    # Each result is written before its dead filing: the filings follow.
    wait_until(lambda: len(feature_support.jids_in(cluster, "dead")) == 2, timeout=15, message="filed")
    assert stat_sum(cluster, "processed") >= 1


@pytest.mark.timeout(120)
def test_an_async_job_killed_mid_run_is_recovered_run_again_and_cancelled_on_the_new_workers_loop(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.async_cancellable.perform_async(out, "k")
    first = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "started") == Counter(["k"]), timeout=45, message="the first run started")
    first.kill()
    start(workers, redis_cluster, **QUICK)
    wait_until(
        lambda: lines(out, "started") == Counter({"k": 2}), timeout=45, message="run again after recovery"
    )
    wait_until(lambda: shown_running(jid), timeout=15, message="shown running")
    assert cogworker.cancel(jid).case == "running"
    wait_until(lambda: stat_sum(cluster, "cancelled") == 1, timeout=30, message="the recovered run cancelled")
    assert lines(out, "ran") == Counter()
    assert queued_anywhere(cluster) == 0


@pytest.mark.timeout(90)
def test_two_prefixes_on_one_cluster_run_only_their_own_jobs(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.tracked.set(expires_in=600).perform_async(out, "mine")
    other = start(workers, redis_cluster, COGWORKER_KEY_PREFIX="other:")
    wait_until(lambda: other.events_named("worker_started") or other.events(), timeout=30, message="other up")
    assert queued_anywhere(cluster) == 1 and cogworker.status(jid) == "queued"
    start(workers, redis_cluster)
    wait_until(lambda: cogworker.status(jid) == "complete", timeout=45, message="run by its own deployment")
    assert lines(out, "ran") == Counter(["mine"])
    assert all(e.get("jid") != jid for e in other.events())


@pytest.mark.timeout(90)
def test_an_awaitable_push_from_a_first_call_is_tracked_and_its_async_job_completed_from_the_loop(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """The awaitable push writes "queued" through its `redis.asyncio` client, and the worker writes the
    async job's statuses from its loop's client: both the home slot's."""
    said = user_call(
        redis_cluster,
        f"""
        import asyncio, cogworker, sharded_feature_jobs as fj

        async def main():
            jid = await fj.async_tracked.aio.perform_async({out!r}, "a")
            print(jid, cogworker.status(jid))
            await cogworker.aio.close()

        asyncio.run(main())
        """,
    )
    jid, state = said.split()
    assert state == "queued"
    start(workers, redis_cluster)
    assert cogworker.result(jid, timeout=45) == "async a"
    wait_until(lambda: cogworker.status(jid) == "complete", timeout=10, message="complete")
    assert lines(out, "ran") == Counter(["a"])
    assert cluster.exists(keys.status(jid)) == 1
