"""`cogworker doctor` and the key guard in the sharded layout, on a real 3-master cluster: cluster health
(every slot served, a replica per master), each master's share of the queue partitions, a lowered
partition count, and wrong-type partition keys moved aside within their own slot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from cogworker import settings as settings_module
from cogworker.cli.main import main
from cogworker.store import connection, key_guard, keys, shards
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until


@pytest.fixture
def home(env: dict[str, str], cluster: redis.RedisCluster) -> Iterator[redis.Redis]:
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    client = connection.connect(loaded)
    yield client
    client.close()


def doctor(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["doctor", "--json", *extra])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]}


def master_of(redis_cluster: RedisCluster, queue: str, index: int = 0) -> int:
    return redis_cluster.owner(key_slot(f"{queue}#{index}".encode()))[0]


def names_on(redis_cluster: RedisCluster, count: int, *, same: bool) -> list[str]:
    """`count` queue names whose partition 0 is on one master (`same`), or on as many masters as can be."""
    chosen: list[str] = []
    owners: list[int] = []
    for n in range(500):
        name = f"q{n}"
        owner = master_of(redis_cluster, name)
        if (same and (not owners or owner == owners[0])) or (not same and owner not in owners):
            chosen.append(name)
            owners.append(owner)
        if len(chosen) == count:
            return chosen
    raise AssertionError("no such names among 500")


def read_lately(cluster: redis.RedisCluster, *names: str) -> None:
    """As a live process's beat says it reads these queues (the unread-queues check)."""
    seconds, _ = cluster.time()  # type: ignore[misc]
    cluster.zadd(keys.LIVE_QUEUES, dict.fromkeys(names, float(seconds)))


def seed(cluster: redis.RedisCluster, *names: str) -> None:
    for name in names:
        cluster.sadd(keys.QUEUES, name)
        cluster.hset(shards.partitions_key(), name, 1)
        cluster.lpush(shards.queue_key(shards.Partition(name, 0)), json.dumps({"jid": name}))
    read_lately(cluster, *names)


def test_a_healthy_cluster_with_partitions_spread(
    home: redis.Redis,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = names_on(redis_cluster, 3, same=False)
    seed(cluster, *names)
    code, checks = doctor(capsys)
    assert checks["cluster slots"]["level"] == "OK"
    assert "16384 of 16384 slots assigned" in checks["cluster slots"]["message"]
    assert checks["cluster replicas"]["level"] == "OK"
    assert checks["sharded layout"]["level"] == "OK"
    assert "'cw:' (no hash tag)" in checks["sharded layout"]["message"]
    spread = checks["partition spread"]
    assert spread["level"] == "OK"
    assert spread["message"] == "3 queue partition(s) over 3 master(s)"
    assert all("1 of 3 partition(s) (33 %), 1 job(s) waiting" in d for d in spread["details"])
    assert checks["partition counts"]["level"] == "OK"
    assert checks["unread queues"]["level"] == "OK"
    assert checks["key types"]["level"] == "OK"
    # The server checks ask every master, and say so.
    assert checks["maxmemory-policy"]["message"] == "noeviction (all 3 masters)"
    assert code == 0, checks


def test_one_master_holding_most_partitions_is_a_warning(
    home: redis.Redis,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = names_on(redis_cluster, 3, same=True)
    seed(cluster, *names)
    _, checks = doctor(capsys)
    spread = checks["partition spread"]
    assert spread["level"] == "WARN"
    port = master_of(redis_cluster, names[0])
    assert f"127.0.0.1:{port} holds 3 of the 3 queue partitions" in spread["message"]


def test_a_recorded_count_above_the_configured_one_is_a_warning(
    home: redis.Redis, cluster: redis.RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(cluster, "default")
    cluster.hset(shards.partitions_key(), "default", 4)  # pushed by processes with a larger setting
    cluster.lpush(shards.queue_key(shards.Partition("default", 3)), json.dumps({"jid": "late"}))
    _, checks = doctor(capsys)
    counts = checks["partition counts"]
    assert counts["level"] == "WARN"
    assert counts["details"] == ["default: 4 recorded, 1 configured"]
    # Every recorded partition is still counted as a place jobs wait.
    assert checks["partition spread"]["message"] == "4 queue partition(s) over 3 master(s)"


def test_a_master_without_a_replica_then_back(
    home: redis.Redis,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed(cluster, "reports")
    master, replicas = redis_cluster.owner(key_slot(b"reports#0"))
    replica = next(node for node in redis_cluster.nodes if node.port == replicas[0])
    replica.pause()  # SIGSTOP: the other nodes mark it failed after the node timeout
    try:
        checks = wait_until(
            lambda: (c := doctor(capsys)[1])["cluster replicas"]["level"] == "WARN" and c,
            timeout=30,
            interval=0.2,
            message="doctor to see a master without a replica",
        )
    finally:
        replica.resume()
    warning = checks["cluster replicas"]
    assert warning["message"].startswith("1 of 3 master(s) without a replica")
    assert warning["details"][0].startswith(f"127.0.0.1:{master}: ")
    assert "queue partition(s): reports#0" in warning["details"][0]
    # Slots are all still served: a lost replica is not an outage.
    assert checks["cluster slots"]["level"] in ("OK", "WARN")
    redis_cluster.wait_ok()
    assert doctor(capsys)[1]["cluster replicas"]["level"] == "OK"


def test_after_a_failover_the_partition_is_counted_on_its_new_master(
    home: redis.Redis,
    cluster: redis.RedisCluster,
    redis_cluster: RedisCluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed(cluster, "reports")
    old, new = redis_cluster.failover(key_slot(b"reports#0"))
    redis_cluster.wait_ok()
    checks = wait_until(
        lambda: (c := doctor(capsys)[1])["cluster replicas"]["level"] == "OK" and c,
        timeout=30,
        interval=0.2,
        message="the old master to be listed as the new one's replica",
    )
    details = checks["partition spread"]["details"]
    assert any(d.startswith(f"127.0.0.1:{new}: 1 of 1") for d in details), details
    assert not any(d.startswith(f"127.0.0.1:{old}:") for d in details), details
    assert checks["cluster slots"]["level"] == "OK"


def everywhere(cluster: redis.RedisCluster, match: str) -> list[str]:
    """Keys matching on every master (redis-py's KEYS asks one node only)."""
    return sorted(str(k) for k in cluster.scan_iter(match=match))


def test_the_key_guard_moves_a_wrong_type_partition_key_aside_in_its_own_slot(
    home: redis.Redis, cluster: redis.RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(cluster, "reports")
    cluster.hset(shards.partitions_key(), "reports", 2)
    wrong = shards.queue_key(shards.Partition("reports", 1))
    cluster.set(wrong, "not a list")
    in_progress = shards.in_progress(shards.Partition("reports", 0), "host:1:aa")
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, "host:1:aa")
    cluster.hset(in_progress, "a", "b")
    outbox = shards.outbox(shards.Partition("reports", 0))
    cluster.rpush(outbox, "not a hash")
    # Not cogworker's: a family it doesn't know, and a tag that isn't a partition's.
    foreign = ["cw:{reports#1}:notes", "cw:{elsewhere}:queue"]
    for key in foreign:
        cluster.set(key, "keep me")
    assert key_guard.expected_type(wrong) == "list"
    assert key_guard.expected_type(shards.retry(shards.Partition("reports", 1))) == "zset"
    assert (
        key_guard.expected_type(shards.stat_day(shards.Partition("reports", 1), "processed", "2026-01-01"))
        == "string"
    )
    assert [key_guard.expected_type(key) for key in foreign] == [None, None]

    code, checks = doctor(capsys)
    assert code == 1
    assert checks["key types"]["level"] == "FAIL"
    assert sorted(checks["key types"]["details"]) == [
        f"{in_progress} is a hash, should be a list",
        f"{outbox} is a list, should be a hash",
        f"{wrong} is a string, should be a list",
    ]
    code, checks = doctor(capsys, "--fix")
    assert checks["key types"]["level"] == "OK"
    assert checks["quarantine"]["level"] == "WARN"
    moved = everywhere(cluster, "cw:{reports#1}:quarantine:*")
    assert len(moved) == 1 and moved[0].startswith("cw:{reports#1}:quarantine:queue:")
    assert cluster.get(moved[0]) == "not a list" and cluster.ttl(moved[0]) > 0
    assert len(everywhere(cluster, "cw:{reports#0}:quarantine:inprogress:host:1:aa:*")) == 1
    assert len(everywhere(cluster, "cw:{reports#0}:quarantine:outbox:*")) == 1
    assert [cluster.get(key) for key in foreign] == ["keep me", "keep me"]
    # A second pass finds nothing more to move.
    assert key_guard.check(home, settings_module.load_settings(), ("reports",)) == []


def test_a_wrong_type_error_names_what_a_partition_key_holds(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    wrong = shards.queue_key(shards.Partition("reports", 0))
    cluster.set(wrong, "x")
    error = key_guard.wrong_type_error(home, wrong)
    assert error.found == "string"
    assert cluster.smembers(keys.GUARD_REQUESTS) == {wrong}


def test_the_unsettled_backlog_counts_every_partitions_list(
    home: redis.Redis, cluster: redis.RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(cluster, "reports")
    cluster.hset(shards.partitions_key(), "reports", 2)
    cluster.lpush("cw:{reports#1}:unsettled", "a", "b")
    cluster.lpush(keys.UNSETTLED, "c")
    _, checks = doctor(capsys)
    assert checks["unsettled"]["level"] == "WARN"
    assert checks["unsettled"]["message"].startswith("3 retry/dead filing(s)")
    assert key_guard.expected_type("cw:{reports#1}:unsettled") == "list"
