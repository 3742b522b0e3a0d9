"""Cancelling jobs in the sharded layout, on a real 3-master cluster with real sharded workers: a waiting
job is taken off its partition's queue or schedule in that partition's slot and the cancel finished in the
home slot (ops/cancel_shards.py); a running one is cancelled by its worker, which reads the home slot's
cancel record (worker/running/cancelled.py)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import pytest
import redis
import sharded_feature_jobs as fj
from redis.crc import key_slot
from starlette.testclient import TestClient

import cogworker
from cogworker import codec
from cogworker import settings as settings_module
from cogworker.api import client as cw_client
from cogworker.ops import cancel as ops_cancel
from cogworker.ops import cancel_shards
from cogworker.store import keys, shards
from cogworker.web import create_app
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
from tests.e2e.sharded.pushing import configured_api
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out


@pytest.mark.timeout(120)
def test_a_users_first_calls_cancel_a_queued_a_scheduled_and_a_running_job(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    said = user_call(
        redis_cluster,
        f"""
        import cogworker, sharded_feature_jobs as fj
        queued = fj.tracked.perform_async({out!r}, "queued")
        later = fj.mark.perform_in(600, {out!r}, "later")
        print(cogworker.cancel(queued).case, cogworker.cancel(later).case, cogworker.status(queued))
        """,
    )
    assert said == "queued scheduled cancelled"
    assert queued_anywhere(cluster) == 0 and feature_support.jids_in(cluster, "schedule") == []
    assert stat_sum(cluster, "cancelled") == 2  # counted in the jobs' partitions
    start(workers, redis_cluster)
    sync = fj.cancellable.perform_async(out, "sync")
    wait_until(lambda: lines(out, "started") == Counter(["sync"]), timeout=45, message="the job started")
    wait_until(lambda: shown_running(sync), timeout=15, message="the job shown running")
    said = user_call(redis_cluster, f"import cogworker; print(cogworker.cancel({sync!r}).case)")
    assert said == "running"
    wait_until(lambda: cogworker.status(sync) == "cancelled", timeout=20, message="ended as cancelled")
    wait_until(lambda: stat_sum(cluster, "cancelled") == 3, timeout=15, message="counted in its partition")
    assert lines(out, "ran") == Counter()  # neither the waiting jobs nor the running one ran on
    assert feature_support.jids_in(cluster, "retry") == [] and feature_support.jids_in(cluster, "dead") == []


@pytest.mark.timeout(90)
def test_a_running_async_job_is_cancelled_on_the_workers_loop(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    start(workers, redis_cluster)
    jid = fj.async_cancellable.perform_async(out, "a")
    wait_until(lambda: shown_running(jid), timeout=45, message="the job shown running")
    assert cogworker.cancel(jid).case == "running"
    wait_until(lambda: stat_sum(cluster, "cancelled") == 1, timeout=20, message="ended as cancelled")
    wait_until(lambda: queued_anywhere(cluster) == 0, timeout=10, message="nothing queued")
    assert lines(out, "ran") == Counter()


@pytest.mark.timeout(120)
def test_a_job_cancelled_while_its_worker_is_sigkilled_is_recovered_and_not_run_again(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.cancellable.perform_async(out, "k")
    first = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: shown_running(jid), timeout=45, message="the job shown running")
    first.signal(19)  # SIGSTOP: it can't act on the cancel
    assert cogworker.cancel(jid).case == "running"
    first.kill()
    start(workers, redis_cluster, **QUICK)
    wait_until(
        lambda: stat_sum(cluster, "cancelled") == 1, timeout=60, message="recovered and ended cancelled"
    )
    wait_until(lambda: cogworker.status(jid) == "cancelled", timeout=10, message="its status says so")
    assert lines(out, "started") == Counter(["k"])  # never run again
    assert queued_anywhere(cluster) == 0


@pytest.mark.timeout(60)
def test_a_cancel_whose_partition_step_ran_but_whose_reply_was_lost_answers_the_same_when_asked_again(
    api: None, cluster: redis.RedisCluster, out: str
) -> None:
    """The partition's step ran (the job off its queue, counted, the answer kept there) and the canceller
    never heard back, so the home step never ran: asking again finishes it and answers the same."""
    jid = fj.tracked.perform_async(out, "lost")
    p = partition_of(jid)
    conn = cw_client.connection()
    scripts = cogworker.api.cancel._bound_scripts(conn)
    raw = str(cluster.lindex(shards.queue_key(p), 0))
    ops_cancel.record(conn, scripts, jid)
    kept = codec.dumps({"case": "queued", "job": fj.tracked.name, "queue": "fq"})
    assert cancel_shards.remove(conn, scripts, p, jid, shards.queue_key(p), False, raw, kept, 60)
    assert cogworker.status(jid) == "queued"  # the home step is still to run
    again = cogworker.cancel(jid)
    assert (again.case, again.job) == ("queued", fj.tracked.name)
    assert cogworker.status(jid) == "cancelled"
    assert cogworker.cancel(jid).case == "queued"  # and again: the same answer, nothing more counted
    assert stat_sum(cluster, "cancelled") == 1
    assert cluster.zscore(keys.CANCELS, jid) is None


@pytest.mark.timeout(60)
def test_a_cancel_whose_partition_step_never_ran_takes_the_job_off_when_asked_again(
    api: None, cluster: redis.RedisCluster, out: str
) -> None:
    jid = fj.tracked.perform_async(out, "never")
    conn = cw_client.connection()
    ops_cancel.record(conn, cogworker.api.cancel._bound_scripts(conn), jid)  # step 1 only
    assert queued_anywhere(cluster) == 1
    assert cogworker.cancel(jid).case == "queued"
    assert queued_anywhere(cluster) == 0 and stat_sum(cluster, "cancelled") == 1
    assert cogworker.status(jid) == "cancelled"


@pytest.mark.timeout(90)
def test_two_prefixes_on_one_cluster_dont_see_each_others_cancels(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.mark.perform_async(out, "mine")
    said = user_call(
        redis_cluster,
        f"import cogworker; print(cogworker.cancel({jid!r}).case)",
        COGWORKER_KEY_PREFIX="other:",
    )
    assert said == "not_found"
    assert queued_anywhere(cluster) == 1
    start(workers, redis_cluster)
    wait_until(lambda: lines(out, "ran") == Counter(["mine"]), timeout=45, message="it ran all the same")
    assert stat_sum(cluster, "cancelled") == 0


@pytest.mark.timeout(30)
def test_a_cancel_in_a_deployment_that_knows_no_queue_yet_answers_not_found(
    api: None, cluster: redis.RedisCluster
) -> None:
    """No partition recorded anywhere (nothing pushed yet): there is no place to search, and the cancel
    is kept for a worker that fetches the jid later."""
    outcome = cogworker.cancel("nothing-here")
    assert (outcome.case, outcome.searched_all) == ("not_found", True)
    assert cluster.zscore(keys.CANCELS, "nothing-here") is not None


@pytest.mark.timeout(60)
def test_a_job_in_its_partitions_retry_set_is_taken_off_and_one_in_its_dead_set_is_finished(
    api: None, cluster: redis.RedisCluster, out: str
) -> None:
    retrying, dead = (fj.tracked.build((out, tag), {}) for tag in ("retrying", "dead"))
    for job, family in ((retrying, shards.retry), (dead, shards.dead)):
        entry = {**job, "error_class": "ValueError", "error_message": "x", "retry_count": 0}
        cluster.zadd(family(partition_of(job["jid"])), {codec.dumps(entry): 2_000_000_000})
        cluster.hset(shards.partitions_key(), "fq", 3)
    outcome = cogworker.cancel(retrying["jid"])
    assert (outcome.case, outcome.job) == ("retrying", fj.tracked.name)
    assert feature_support.jids_in(cluster, "retry") == []
    assert cogworker.cancel(dead["jid"]).case == "finished"
    assert feature_support.jids_in(cluster, "dead") == [dead["jid"]]  # left where it is
    assert stat_sum(cluster, "cancelled") == 1


@pytest.mark.timeout(30)
def test_the_job_page_of_a_deployment_that_knows_no_queue_yet_says_not_found(
    api: None, cluster: redis.RedisCluster
) -> None:
    with TestClient(create_app(settings_module.load_settings()), follow_redirects=True) as web:
        page = web.get("/jobs/nobody")
        assert page.status_code == 200 and "Not found in any queue" in page.text
        # A cursor naming a place (a link from before) restarts on nothing and says the same.
        again = web.get("/jobs/nobody?place=retry&at=0&first=retry")
        assert again.status_code == 200 and "Not found in any queue" in again.text


@pytest.mark.timeout(90)
def test_a_cancel_whose_partition_master_stopped_mid_call_answers_the_same_when_asked_again(
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    out: str,
) -> None:
    """A real lost reply: the partition's master is stopped (SIGSTOP) just as the cancel's partition
    step is sent, so the step and the read of its answer both time out and the cancel raises; the master
    then resumes and runs the step. Asked again, the cancel finds the partition's answer, runs the home
    step and answers "queued"; the job was counted once."""
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="fq=3", COGWORKER_REDIS_TIMEOUT_S="0.5"):
        home_port = redis_cluster.owner(key_slot(b"home"))[0]
        pushed = [fj.tracked.perform_async(out, f"t{n}") for n in range(60)]
        away = [j for j in pushed if j and master_port(redis_cluster, partition_of(j)) != home_port]
        warm, jid = next((a, b) for a in away for b in away if a != b and partition_of(a) == partition_of(b))
        p = partition_of(jid)
        # A first cancel in that partition leaves a connection to its master in the pool: the step
        # below is then written to a live socket, and runs when the master resumes.
        assert cogworker.cancel(warm).case == "queued"
        node = next(n for n in redis_cluster.nodes if n.port == master_port(redis_cluster, p))
        assert node.proc is not None
        real_remove = cancel_shards.remove

        def stopped_mid_call(*args: Any, **kwargs: Any) -> bool:
            os.kill(node.proc.pid, signal.SIGSTOP)
            try:
                return real_remove(*args, **kwargs)
            finally:
                os.kill(node.proc.pid, signal.SIGCONT)

        monkeypatch.setattr(cancel_shards, "remove", stopped_mid_call)
        with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
            cogworker.cancel(jid)
        monkeypatch.setattr(cancel_shards, "remove", real_remove)
        answer = cancel_shards.answer_key(p, jid)
        wait_until(lambda: cluster.get(answer) is not None, timeout=10, message="the step ran on resuming")
        assert all(jid not in str(raw) for raw in cluster.lrange(shards.queue_key(p), 0, -1))
        assert cogworker.status(jid) == "queued"  # the home step has not run
        again = cogworker.cancel(jid)
        assert again.case == "queued" and cogworker.status(jid) == "cancelled"
        assert int(cluster.get(shards.stat(p, "cancelled")) or 0) == 2  # the warm-up's and this one's
    redis_cluster.wait_ok()


def master_port(redis_cluster: RedisCluster, p: shards.Partition) -> int:
    return redis_cluster.owner(key_slot(f"{p.queue}#{p.index}".encode()))[0]
