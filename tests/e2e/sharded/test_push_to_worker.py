"""Pushed by the job API, run by a sharded worker (h39-worker's fetch, merged to test the two ends): every
job of a partitioned queue, single pushes, a bulk push and awaitable pushes together, runs once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sharded_jobs

import cogworker.aio
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

PARTITIONS = "default=3"


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS=PARTITIONS):
        yield


def test_every_job_pushed_over_the_partitions_runs_once(
    api: None, workers: WorkerPool, redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    out = tmp_path / "events"
    out.touch()
    tags = [f"one{n}" for n in range(20)]
    for tag in tags:
        sharded_jobs.mark.perform_async(tag)
    bulk = [f"bulk{n}" for n in range(60)]
    cogworker.push_bulk(sharded_jobs.mark, [(tag,) for tag in bulk])

    async def awaitable() -> None:
        try:
            for n in range(10):
                await sharded_jobs.mark.aio.perform_async(f"aio{n}")
        finally:
            await cogworker.aio.close()

    asyncio.run(awaitable())
    wanted = [*tags, *bulk, *(f"aio{n}" for n in range(10))]
    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_jobs",
        COGWORKER_QUEUE_PARTITIONS=PARTITIONS,
        SHARDED_TEST_OUT=str(out),
    )
    workers.start(env.pop("COGWORKER_REDIS_URL"), **env)

    def ran() -> Counter[str]:
        return Counter(line.split()[1] for line in out.read_text().splitlines() if line.startswith("ran "))

    wait_until(lambda: sum(ran().values()) >= len(wanted), timeout=60, message="every pushed job ran")
    assert ran() == Counter(wanted)
