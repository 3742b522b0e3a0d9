"""What the sharded chain tests share (test_chains.py, test_chain_replies.py): queues placed on chosen
masters, workers of the sharded deployment running tests/apps/sharded_chain_jobs.py (each run recorded
in a file), and a wait for a chain's end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import cogworker
from cogworker.store import shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api, master_of
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

APP = "sharded_chain_jobs"
SCRIPTS = {"EVAL", "EVALSHA"}
CHAIN_SCRIPTS = ("chain_ack_partition", "chain_apply")


def masters_of(redis_cluster: RedisCluster) -> list[int]:
    """The three masters' ports (each serves one of the three slot ranges)."""
    return sorted({redis_cluster.owner(slot)[0] for slot in (0, 8000, 16000)})


def home_master(redis_cluster: RedisCluster) -> int:
    return redis_cluster.owner(key_slot(b"home"))[0]


def queues_on(redis_cluster: RedisCluster, masters: list[int | None]) -> list[str]:
    """One queue per entry of `masters`, each on that master (None: any master no other queue has)."""
    names = [f"cq{i}" for i in range(200)]
    chosen: list[str] = []
    for want in masters:
        taken = {master_of(redis_cluster, shards.Partition(q)) for q in chosen}
        chosen.append(
            next(
                n
                for n in names
                if n not in chosen
                and (
                    master_of(redis_cluster, shards.Partition(n)) == want
                    if want is not None
                    else master_of(redis_cluster, shards.Partition(n)) not in taken
                )
            )
        )
    return chosen


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch):
        yield


def runs(out: Path) -> list[str]:
    return [line for line in out.read_text().splitlines() if not line.startswith("start ")]


def start(
    workers: WorkerPool, redis_cluster: RedisCluster, out: Path, queues: list[str], **extra: str
) -> Worker:
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE=APP,
        COGWORKER_QUEUES=",".join(queues),
        COGWORKER_POLL_INTERVAL_S="0.2",
        SHARDED_TEST_OUT=str(out),
        COGWORKER_LOG_LEVEL="info",
        **extra,
    )
    return workers.start(env.pop("COGWORKER_REDIS_URL"), **env)


def ended(cid: str, timeout: float = 60) -> dict[str, Any]:
    def over() -> dict[str, Any] | None:
        status = cogworker.chain_status(cid)
        return status if status is not None and status["state"] != "running" else None

    found: dict[str, Any] = wait_until(over, timeout=timeout, message=f"chain {cid} to end")
    return found
