"""Job results in the sharded layout, on a real 3-master cluster with real sharded workers: the job waits
in a partition of its queue, its result is kept in the home slot (`cw:{home}:result:<jid>`) and announced
on its channel, and `cogworker.result(jid)` waits for it on the home slot's client (api/results.py)."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest
import redis
import sharded_feature_jobs as fj
from redis.crc import key_slot

import cogworker
from cogworker import codec
from cogworker.api import results
from cogworker.store import keys, shards
from tests.e2e.sharded import feature_support
from tests.e2e.sharded.feature_support import (
    PARTS,
    QUICK,
    lines,
    partition_of,
    queued_anywhere,
    start,
    user_call,
)
from tests.e2e.sharded.worker_support import in_progress_lists
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out


@pytest.mark.timeout(90)
def test_a_users_first_call_waits_for_the_result_and_the_failure_a_sharded_worker_keeps(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool
) -> None:
    start(workers, redis_cluster)
    said = user_call(
        redis_cluster,
        """
        import cogworker, sharded_feature_jobs as fj
        jid = fj.add.perform_async(2, 3)
        print(jid, cogworker.result(jid, timeout=40))
        failing = fj.boom.perform_async("no luck")
        try:
            cogworker.result(failing, timeout=40)
        except cogworker.JobFailed as exc:
            print(failing, exc.error_class, exc.error_message)
        """,
        timeout=90,
    )
    first, second = said.splitlines()
    jid, value = first.split(" ", 1)
    assert value == "{'sum': 5}"
    failing, error = second.split(" ", 1)
    assert error == "ValueError no luck"
    # Kept in the home slot; the jobs were acknowledged and filed in their partitions.
    assert codec.loads(cluster.get(keys.result(jid))) == {"ok": True, "value": {"sum": 5}}
    assert cluster.ttl(keys.result(jid)) > 0
    # The result is written before the dead filing (api/results.py): the filing follows.
    wait_until(lambda: feature_support.jids_in(cluster, "dead") == [failing], timeout=15, message="filed")
    assert queued_anywhere(cluster) == 0


@pytest.mark.timeout(120)
def test_a_job_killed_mid_run_is_recovered_and_its_result_written_and_announced_once(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.held.perform_async(out, "k")
    watcher = cluster.pubsub()
    watcher.subscribe(keys.result_channel(jid))
    try:
        first = start(workers, redis_cluster, **QUICK)
        wait_until(
            lambda: lines(out, "started") == Counter(["k"]), timeout=45, message="the first run started"
        )
        first.kill()  # SIGKILL mid-run: the job is on its in-progress list in its partition
        assert cluster.exists(keys.result(jid)) == 0
        start(workers, redis_cluster, **QUICK)
        assert cogworker.result(jid, timeout=60) == "done k"
        wait_until(lambda: queued_anywhere(cluster) == 0, timeout=15, message="acknowledged")
        announced = []
        while (message := watcher.get_message(timeout=1.0)) is not None:
            if message["type"] == "message":
                announced.append(message["data"])
        assert announced == [codec.dumps({"ok": True, "value": "done k"})]
    finally:
        watcher.close()
    assert lines(out, "ran") == Counter(["k"])  # the run after recovery, once
    assert cogworker.status(jid) == "complete"


@pytest.mark.timeout(120)
def test_a_result_the_home_master_never_took_is_kept_and_written_once_it_answers_before_the_ack(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """The job ends while the home slot's master is stopped (SIGSTOP): the result's write gets no reply
    (it never ran, or runs when the master resumes). The worker keeps it, with the job's ack behind it
    (the job stays on its partition's in-progress list), and writes it once the home slot answers
    again (its master back, or its replica promoted)."""
    jid = fj.gated.perform_async(out, "g")
    watcher = cluster.pubsub()
    watcher.subscribe(keys.result_channel(jid))
    port = redis_cluster.owner(key_slot(shards.HOME_TAG[1:-1].encode()))[0]
    node = next(n for n in redis_cluster.nodes if n.port == port)
    assert node.proc is not None
    worker = start(workers, redis_cluster, COGWORKER_REDIS_TIMEOUT_S="1")
    wait_until(lambda: lines(out, "started") == Counter(["g"]), timeout=45, message="the job started")
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        Path(f"{out}.g.go").touch()
        wait_until(
            lambda: any(e.get("component") == "Settle" for e in worker.events_named("redis_outage_started")),
            timeout=20,
            message="the result's write failed",
        )
        assert lines(out, "ran") == Counter(["g"])
        p = partition_of(jid)
        if redis_cluster.owner(key_slot(f"{p.queue}#{p.index}".encode()))[0] != port:
            assert sum(in_progress_lists(cluster, [p]).values()) == 1  # not acknowledged meanwhile
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    assert cogworker.result(jid, timeout=60) == "done g"
    wait_until(lambda: queued_anywhere(cluster) == 0, timeout=30, message="nothing queued")
    wait_until(lambda: not any(in_progress_lists(cluster, list(PARTS)).values()), timeout=30, message="acked")
    announced = []
    while (message := watcher.get_message(timeout=1.0)) is not None:
        if message["type"] == "message":
            announced.append(message["data"])
    watcher.close()
    # The write the stopped master had received runs when it resumes, and the kept copy is written too:
    # the same record (SET), announced once or twice, never another value.
    assert announced and set(announced) == {codec.dumps({"ok": True, "value": "done g"})}
    assert codec.loads(cluster.get(keys.result(jid))) == {"ok": True, "value": "done g"}
    assert lines(out, "ran") == Counter(["g"])  # run once
    redis_cluster.wait_ok()


@pytest.mark.timeout(60)
def test_a_result_written_again_after_a_lost_reply_answers_the_same_and_a_waiter_from_before_gets_it(
    api: None, cluster: redis.RedisCluster
) -> None:
    """The worker's write (results.store, SET and PUBLISH in one MULTI on the home slot's client) is sent
    again when its reply is lost (settling/pending.py): after it ran, the second write changes nothing a
    reader sees; when it never ran, a waiter that subscribed meanwhile gets the one that does."""
    conn = cogworker.api.client.connection()
    record = results.success_record("t", {"n": 1})
    results.store(conn, "ran-once", record, 30)
    results.store(conn, "ran-once", record, 30)  # the resend after a lost reply
    assert cogworker.result("ran-once", timeout=0) == {"n": 1}
    # Never ran: nothing under the jid; a waiter gives up at its deadline, and one waiting when the
    # (re)sent write lands gets it.
    with pytest.raises(cogworker.ResultTimeout):
        cogworker.result("never-ran", timeout=0.2)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(cogworker.result("never-ran", timeout=20)))
    waiter.start()
    wait_until(lambda: _subscribers(cluster, "never-ran") == 1, timeout=10, message="the waiter subscribed")
    results.store(conn, "never-ran", record, 30)
    waiter.join(timeout=20)
    assert got == [{"n": 1}]
    # Every result key is the home slot's, none in a partition's.
    assert all(shards.HOME_TAG in str(k) for k in cluster.scan_iter(match="cw:*result*", target_nodes="all"))


def _subscribers(cluster: redis.RedisCluster, jid: str) -> int:
    counts = cluster.pubsub_numsub(keys.result_channel(jid), target_nodes="all")
    return max((int(n) for _name, n in counts), default=0) if isinstance(counts, list) else 0


@pytest.mark.timeout(60)
def test_two_prefixes_on_one_cluster_dont_see_each_others_results(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    conn = cogworker.api.client.connection()
    results.store(conn, "shared-jid", results.success_record("t", "cw's"), 30)
    said = user_call(
        redis_cluster,
        """
        import cogworker
        try:
            cogworker.result("shared-jid", timeout=0.5)
        except cogworker.ResultTimeout:
            print("not found")
        """,
        COGWORKER_KEY_PREFIX="other:",
    )
    assert said == "not found"
    assert cogworker.result("shared-jid", timeout=0) == "cw's"
