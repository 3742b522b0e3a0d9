"""Death notices and on_death hooks in the sharded layout, on a real 3-master cluster with real sharded
workers: a job's dead filing pushes its notice on its partition's `deaths` list in the same script
(settle.lua, requeue.lua for a poison pill), and a worker with hooks pops from every partition
(worker/running/death_hooks.py). Each hook call is noted in a file outside the cluster
(tests/apps/sharded_feature_jobs.py `noted`). A dead filing sent again pushes no second notice:
tests/e2e/sharded/test_worker_replies.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis
import sharded_feature_jobs as fj

import cogworker
from cogworker import codec
from cogworker.api import death
from cogworker.store import keys, shards
from tests.e2e.sharded import feature_support
from tests.e2e.sharded.feature_support import PARTS, QUICK, lines, partition_of, start, user_call
from tests.support.daemon_env import run_cogworker
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out
DEAD_OWNER = "gone:1:dead"


def notices_left(cluster: redis.RedisCluster) -> int:
    return sum(int(cluster.llen(shards.deaths(p))) for p in PARTS) + int(cluster.llen(keys.DEATHS))


@pytest.mark.timeout(90)
def test_a_users_first_call_pushes_jobs_that_fail_for_good_and_a_sharded_workers_hook_sees_each_once(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    said = user_call(
        redis_cluster,
        f"""
        import sharded_feature_jobs as fj
        print(" ".join(fj.tracked_dies.perform_async({out!r}, f"d{{n}}") for n in range(12)))
        """,
    )
    jids = said.split()
    assert len({partition_of(j) for j in jids}) >= 2  # spread over partitions (random jids)
    start(workers, redis_cluster)
    start(workers, redis_cluster)
    wait_until(lambda: sum(lines(out, "death").values()) == 12, timeout=45, message="twelve hook calls")
    assert lines(out, "death") == Counter(f"{jid}-failed" for jid in jids)  # each once, cause failed
    assert sorted(feature_support.jids_in(cluster, "dead")) == sorted(jids)
    assert all(cogworker.status(jid) == "failed" for jid in jids)
    wait_until(lambda: notices_left(cluster) == 0, timeout=10, message="every notice popped")


@pytest.mark.timeout(90)
def test_a_poison_pill_buried_by_recovery_in_its_partition_reaches_the_hooks(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """As a job that killed its process max_orphanings times leaves it: on a dead (SIGKILLed) owner's
    in-progress list in its partition, its orphan count at the limit. A live worker's recovery buries
    it in that partition's dead set with its notice, and a hook sees it once."""
    jid = fj.tracked.perform_async(out, "pill")
    p = partition_of(jid)
    raw = cluster.rpop(shards.queue_key(p))
    cluster.lpush(shards.in_progress(p, DEAD_OWNER), raw)
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, DEAD_OWNER)
    cluster.set(shards.orphanings(p, jid), 3)  # settings.max_orphanings
    start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "death") == Counter([f"{jid}-poison_pill"]), timeout=45, message="hooked")
    assert feature_support.jids_in(cluster, "dead") == [jid]
    assert cluster.zcard(shards.dead(p)) == 1
    assert lines(out, "ran") == Counter()  # never run
    wait_until(lambda: cogworker.status(jid) == "failed", timeout=10, message="its status says failed")


@pytest.mark.timeout(90)
def test_notices_wait_in_their_partitions_while_no_worker_runs_and_the_next_one_handles_them(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jids = [fj.tracked_dies.perform_async(out, f"w{n}") for n in range(3)]
    first = start(workers, redis_cluster)
    wait_until(lambda: sum(lines(out, "death").values()) == 3, timeout=45, message="handled")
    first.kill()
    # Filed in dead while no worker runs (as a filing or an operator's kill leaves it): its notice waits
    # in its partition.
    more = fj.tracked_dies.perform_async(out, "later")
    p = partition_of(more)
    text = cluster.lindex(shards.queue_key(p), 0)
    entry = {**codec.loads(text), "error_class": "ValueError", "error_message": "x"}
    cluster.delete(shards.queue_key(p))
    cluster.lpush(shards.deaths(p), death.notice("failed", codec.dumps(entry)))
    start(workers, redis_cluster)
    wait_until(lambda: lines(out, "death")[f"{more}-failed"] == 1, timeout=45, message="the waiting notice")
    assert lines(out, "death") == Counter([f"{j}-failed" for j in jids] + [f"{more}-failed"])
    assert notices_left(cluster) == 0


@pytest.mark.timeout(90)
def test_two_prefixes_on_one_cluster_dont_handle_each_others_notices(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    jid = fj.tracked_dies.perform_async(out, "mine")
    other = start(workers, redis_cluster, COGWORKER_KEY_PREFIX="other:")
    mine = start(workers, redis_cluster)
    wait_until(lambda: lines(out, "death") == Counter([f"{jid}-failed"]), timeout=45, message="hooked once")
    # Both run the same hook: the one call was the own deployment's worker's.
    (line,) = [t for t in Path(out).read_text().splitlines() if t.startswith("death-")]
    assert line.split()[1] == str(mine.proc.pid), (line, mine.proc.pid, other.proc.pid)
    assert other.proc.poll() is None


@pytest.mark.timeout(90)
def test_a_notice_in_a_cleared_queues_partition_still_reaches_the_hooks(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    """`cogworker queue clear` forgets the queue's name in the home registry, but its partitions (their
    retry and dead sets, still recorded in the home `partitions` hash) live on: a job of theirs that
    dies later leaves its notice there, and the hooks must still find it."""
    retrying = fj.tracked_dies.build((out, "retried"), {})
    p = partition_of(retrying["jid"])
    fj.mark.perform_async(out, "queued")  # records the queue
    cleared = run_cogworker(feature_support.deployment_env(redis_cluster), "queue", "clear", "fq", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    assert not cluster.sismember(keys.QUEUES, "fq")
    # As the queue's retry set leaves it when the entry's last try fails for good: filed in the
    # partition's dead set, its notice on the partition's deaths list.
    entry = {**retrying, "error_class": "ValueError", "error_message": "x"}
    cluster.zadd(shards.dead(p), {codec.dumps(entry): 1})
    cluster.lpush(shards.deaths(p), death.notice("failed", codec.dumps(entry)))
    start(workers, redis_cluster, COGWORKER_QUEUES="other")
    jid = retrying["jid"]
    wait_until(lambda: lines(out, "death") == Counter([f"{jid}-failed"]), timeout=30, message="hooked")
    assert notices_left(cluster) == 0
