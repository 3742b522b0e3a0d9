"""Job statuses in the sharded layout, on a real 3-master cluster with real sharded workers: the status
hash is the home slot's (`cw:{home}:status:<jid>`), written at push ("queued", before the job is written
to its partition) and around the run by the worker's middleware (api/job_status.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import redis
import sharded_feature_jobs as fj

import cogworker
from cogworker.store import keys, shards
from tests.e2e.sharded import feature_support
from tests.e2e.sharded.feature_support import QUICK, lines, partition_of, queued_anywhere, start, user_call
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out


@pytest.mark.timeout(90)
def test_a_users_first_call_reads_queued_then_a_sharded_worker_completes_and_fails_the_jobs(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    said = user_call(
        redis_cluster,
        f"""
        import cogworker, sharded_feature_jobs as fj
        good = fj.tracked.perform_async({out!r}, "good")
        bad = fj.tracked_dies.perform_async({out!r}, "bad")
        print(good, bad, cogworker.status(good), cogworker.status(bad))
        """,
    )
    good, bad, *states = said.split()
    assert states == ["queued", "queued"]
    assert cluster.hget(keys.status(good), "queue") == "fq"
    start(workers, redis_cluster)
    wait_until(lambda: cogworker.status(good) == "complete", timeout=45, message="complete")
    wait_until(lambda: cogworker.status(bad) == "failed", timeout=45, message="failed")
    details = cogworker.api.job_status.details(bad) or {}
    assert details["error_class"] == "ValueError" and details["error_message"] == "bad fails for good"
    assert lines(out, "ran") == Counter(["good"]) and lines(out, "tried") == Counter(["bad"])
    # "failed" is written by the middleware, before the dead filing: the filing follows.
    wait_until(lambda: feature_support.jids_in(cluster, "dead") == [bad], timeout=15, message="filed")
    # Nothing of a status in a partition's slot.
    assert not [
        k for k in cluster.scan_iter(match="cw:*status*", target_nodes="all") if shards.HOME_TAG not in k
    ]


@pytest.mark.timeout(120)
def test_a_job_killed_while_working_is_working_until_its_run_after_recovery_completes_it(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.held.perform_async(out, "w")
    first = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "started") == Counter(["w"]), timeout=45, message="the first run started")
    assert cogworker.status(jid) == "working"
    first.kill()
    assert cogworker.status(jid) == "working"  # no one wrote an end
    start(workers, redis_cluster, **QUICK)
    wait_until(lambda: cogworker.status(jid) == "complete", timeout=60, message="complete after recovery")
    assert lines(out, "ran") == Counter(["w"])
    assert queued_anywhere(cluster) == 0


@pytest.mark.timeout(60)
def test_a_push_sent_again_after_a_lost_reply_keeps_one_queued_job_and_one_status(
    api: None, cluster: redis.RedisCluster, out: str
) -> None:
    """Sent again (as after PushOutcomeUnknown): "queued" written twice is the same hash, the partition's
    marker makes no second copy."""
    payload = fj.tracked.build((out, "again"), {})
    assert fj.tracked.send(payload) == payload["jid"]
    first = cluster.hgetall(keys.status(payload["jid"]))
    assert fj.tracked.send(dict(payload)) == payload["jid"]
    again = cluster.hgetall(keys.status(payload["jid"]))
    assert first["status"] == again["status"] == "queued" and first.keys() == again.keys()
    assert queued_anywhere(cluster) == 1
    assert cluster.llen(shards.queue_key(partition_of(payload["jid"]))) == 1


@pytest.mark.timeout(60)
def test_a_push_its_partition_refused_leaves_no_queued_status(
    api: None, cluster: redis.RedisCluster, out: str
) -> None:
    """A write that never ran: the partition's queue key is of another type, so push_batch.lua refuses
    it; the "queued" written before it in the home slot is taken back."""
    payload = fj.tracked.build((out, "refused"), {})
    target = shards.queue_key(partition_of(payload["jid"]))
    cluster.set(target, "not a list")
    with pytest.raises(redis.RedisError):
        fj.tracked.send(payload)
    assert cogworker.status(payload["jid"]) is None
    assert cluster.exists(keys.status(payload["jid"])) == 0


@pytest.mark.timeout(60)
def test_two_prefixes_on_one_cluster_dont_see_each_others_statuses(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, out: str
) -> None:
    jid = fj.tracked.perform_async(out, "mine")
    said = user_call(
        redis_cluster,
        f"import cogworker; print(cogworker.status({jid!r}))",
        COGWORKER_KEY_PREFIX="other:",
    )
    assert said == "None"
    assert cogworker.status(jid) == "queued"
