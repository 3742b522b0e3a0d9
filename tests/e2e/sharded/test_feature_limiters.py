"""Rate limiters in the sharded layout, on a real 3-master cluster with real sharded workers: a limiter's
key is the home slot's (`cw:{home}:limiter:<kind>:<name>`), checked by its script on the home slot's
client, and a job a full limiter puts back is filed in its own partition's schedule set, counted
`limited` there (api/limiter.py, api/limit_jobs.py, worker/settling/shard_route.py)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import pytest
import redis
import sharded_feature_jobs as fj
from redis.crc import key_slot

import cogworker
from cogworker import codec
from cogworker.api import limit_scripts
from cogworker.store import keys, shards
from tests.e2e.sharded import feature_support
from tests.e2e.sharded.feature_support import PARTS, QUICK, lines, queued_anywhere, start, stat_sum, user_call
from tests.e2e.sharded.pushing import configured_api
from tests.support.daemon_env import run_cogworker
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

api = feature_support.api
out = feature_support.out


def passes_now(limiter: cogworker.limiter.Limiter) -> bool:
    """The test's process passes `limiter` at once (and gives the slot back)."""
    try:
        limiter.acquire()
    except cogworker.limiter.OverLimit:
        return False
    limiter.release()
    return True


def now_limiter(limiter: cogworker.limiter.Limiter) -> cogworker.limiter.Limiter:
    return cogworker.limiter.concurrent(limiter.name, 1, lease_s=4, wait_timeout=0)


@pytest.mark.timeout(120)
def test_a_users_first_call_passes_limiters_and_a_sharded_worker_puts_back_jobs_over_them(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    said = user_call(
        redis_cluster,
        f"""
        import cogworker, sharded_feature_jobs as fj
        with fj.ONE_AT_ONCE:
            inside = cogworker.limiter.concurrent("fq-one", 1, lease_s=4, wait_timeout=0)
            try:
                inside.acquire()
            except cogworker.OverLimit:
                print("full")
        with cogworker.limiter.concurrent("fq-one", 1, lease_s=4, wait_timeout=0):
            print("given back")
        for tag in ("a", "b", "c"):
            fj.paced.perform_async({out!r}, tag)
        pushed = [fj.hourly.perform_async({out!r}, tag) for tag in ("h1", "h2")]
        print(all(jid is not None for jid in pushed))
        """,
    )
    assert said.splitlines() == ["full", "given back", "True"]
    start(workers, redis_cluster)
    wait_until(
        lambda: lines(out, "ran")["a"] + lines(out, "ran")["b"] + lines(out, "ran")["c"] == 3,
        timeout=45,
        message="paced",
    )
    # One an hour: the second is put back in its partition's schedule set until the next window.
    wait_until(lambda: len(feature_support.jids_in(cluster, "schedule")) == 1, timeout=30, message="put back")
    (put_back,) = [codec.loads(raw) for p in PARTS for raw in cluster.zrange(shards.schedule(p), 0, -1)]
    assert put_back["limited_by"] == "fq-hourly" and put_back["class"] == fj.hourly.name
    ran = lines(out, "ran")
    assert ran["a"] == ran["b"] == ran["c"] == 1 and ran["h1"] + ran["h2"] == 1
    assert put_back["args"][1] == ("h2" if ran["h1"] else "h1")
    # The bucket (one a second) put two of the three back at least once, counted in their partitions.
    assert stat_sum(cluster, "limited") >= 2
    home = [k for k in cluster.scan_iter(match="cw:*limiter*", target_nodes="all")]
    assert home and all(shards.HOME_TAG in k for k in home), home


@pytest.mark.timeout(120)
def test_a_worker_sigkilled_while_holding_a_concurrent_slot_gives_it_back_by_its_lease(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster, workers: WorkerPool, out: str
) -> None:
    holder = fj.one_at_once.perform_async(out, "hold", True)
    first = start(workers, redis_cluster, **QUICK)
    wait_until(lambda: lines(out, "started") == Counter(["hold"]), timeout=45, message="holding the slot")
    first.kill()
    assert not passes_now(now_limiter(fj.ONE_AT_ONCE))  # still held by the dead worker's lease
    waiting = fj.one_at_once.perform_async(out, "next")
    start(workers, redis_cluster, **QUICK)
    # The lease (4 s) ends by itself; the recovered holder and the waiting job then both run, once.
    wait_until(lambda: lines(out, "ran") == Counter(["hold", "next"]), timeout=60, message="both ran")
    assert cogworker.status(holder) == cogworker.status(waiting) == "complete"
    wait_until(lambda: passes_now(now_limiter(fj.ONE_AT_ONCE)), timeout=15, message="the slot free again")
    assert queued_anywhere(cluster) == 0 and feature_support.jids_in(cluster, "schedule") == []


@pytest.mark.timeout(60)
def test_an_acquire_whose_reply_was_lost_holds_a_slot_until_its_lease_a_release_sent_again_frees_no_more(
    api: None, cluster: redis.RedisCluster
) -> None:
    """The acquire's script ran (a slot taken under a token its caller never learnt) and its reply was
    lost: the slot comes back when its lease ends. One that never ran holds nothing. A release sent again
    after a lost reply removes nothing more than its own token."""
    limiter = cogworker.limiter.concurrent("fq-lost", 2, lease_s=2, wait_timeout=0)
    key = keys.limiter("concurrent", "fq-lost")
    run = limit_scripts.LimitScripts().run  # the scripts limiters run, on the job API's client
    assert run("limit_concurrent", [key], ["acquire", "lost-1", 2, 2000])[0] == 1
    assert run("limit_concurrent", [key], ["acquire", "kept-2", 2, 2000])[0] == 1
    assert not passes_now(limiter)  # both slots held: one of them by the lost reply's token
    assert run("limit_concurrent", [key], ["release", "kept-2"]) == [1, 0, 0]
    assert run("limit_concurrent", [key], ["release", "kept-2"]) == [1, 0, 0]  # sent again
    assert cluster.zrange(key, 0, -1) == ["lost-1"]  # the resend freed nobody else's slot
    wait_until(lambda: cluster.zcard(key) == 0 or _expired(cluster, key), timeout=10, message="lease ended")
    assert passes_now(limiter) and passes_now(limiter)


def _expired(cluster: redis.RedisCluster, key: str) -> bool:
    seconds, micros = cluster.time()
    now_ms = seconds * 1000 + micros // 1000
    return all(score <= now_ms for _token, score in cluster.zrange(key, 0, -1, withscores=True))


@pytest.mark.timeout(60)
def test_two_prefixes_on_one_cluster_dont_share_a_limiter_of_the_same_name(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    mine = cogworker.limiter.concurrent("fq-one", 1, lease_s=30, wait_timeout=0)
    mine.acquire()
    try:
        said = user_call(
            redis_cluster,
            """
            import cogworker
            with cogworker.limiter.concurrent("fq-one", 1, lease_s=30, wait_timeout=0):
                print("passed")
            """,
            COGWORKER_KEY_PREFIX="other:",
        )
        assert said == "passed"
        assert not passes_now(mine)
    finally:
        mine.release()
    assert passes_now(mine)


@pytest.mark.timeout(60)
def test_the_cli_lists_and_shows_the_limiters_held_in_the_home_slot(
    api: None, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    held = cogworker.limiter.concurrent("fq-shown", 2, lease_s=30, wait_timeout=0)
    held.acquire()
    try:
        env = feature_support.deployment_env(redis_cluster)
        listed = run_cogworker(env, "limiter", "list")
        assert listed.returncode == 0, listed.stderr
        assert "1/2 held" in next(line for line in listed.stdout.splitlines() if line.startswith("fq-shown"))
        shown = run_cogworker(env, "limiter", "show", "fq-shown")
        assert shown.returncode == 0, shown.stderr
        assert "fq-shown (concurrent): 1/2 held" in shown.stdout
        assert str(os.getpid()) in shown.stdout  # the holder: this process
    finally:
        held.release()


@pytest.mark.timeout(90)
def test_an_acquire_whose_home_master_stopped_mid_call_holds_its_slot_only_until_its_lease(
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
) -> None:
    """A real lost reply: the home slot's master is stopped (SIGSTOP) as an acquire is sent, so the
    caller times out and raises; the master then resumes and runs it, a slot held under a token no one
    will give back. The lease ends it: the limiter passes again within its lease, never before it ends
    (the slot was really taken)."""
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="fq=3", COGWORKER_REDIS_TIMEOUT_S="0.5"):
        limiter = cogworker.limiter.concurrent("fq-stopped", 1, lease_s=3, wait_timeout=0)
        assert passes_now(limiter)  # a connection to the home master is now idle in the limiter's pool
        node = next(n for n in redis_cluster.nodes if n.port == redis_cluster.owner(key_slot(b"home"))[0])
        assert node.proc is not None
        real_run = limit_scripts.LimitScripts.run

        def stopped_mid_call(self: limit_scripts.LimitScripts, *args: Any) -> list[Any]:
            os.kill(node.proc.pid, signal.SIGSTOP)
            try:
                return real_run(self, *args)
            finally:
                os.kill(node.proc.pid, signal.SIGCONT)

        monkeypatch.setattr(limit_scripts.LimitScripts, "run", stopped_mid_call)
        with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
            limiter.acquire()
        monkeypatch.setattr(limit_scripts.LimitScripts, "run", real_run)
        key = keys.limiter("concurrent", "fq-stopped")
        wait_until(lambda: cluster.zcard(key) == 1, timeout=10, message="the acquire ran on resuming")
        assert not passes_now(limiter)  # held by the lost reply's token
        wait_until(lambda: passes_now(limiter), timeout=10, message="its lease ended")
    redis_cluster.wait_ok()
