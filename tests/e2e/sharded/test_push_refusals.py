"""The features the sharded layout refuses for now (their state is in the home slot and must change in
the same step as a job's ack in its partition's slot): unique jobs, chains, periodic entries (batches
run there: test_batches.py). Each is refused at the user's call with shards.NotShardedYet naming the
feature, and nothing is written on any master; the plain push beside it still works."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import cogworker
import cogworker.aio
from cogworker import exitcodes
from cogworker.api import periodic as periodic_module
from cogworker.store import shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api, every_key, queued
from tests.support.daemon_env import run_cogworker
from tests.support.redis_cluster import RedisCluster


@cogworker.job(queue="refusals")
def plain(n: int) -> None:
    """Never run here."""


@cogworker.job(queue="refusals", unique="until_executed")
def unique_job(n: int) -> None:
    """Never run here."""


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch):
        yield


def _refused(feature: str, call: Callable[[], Any], redis_cluster: RedisCluster) -> None:
    with pytest.raises(shards.NotShardedYet) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(f"{feature} can't be used with COGWORKER_CLUSTER_SHARDING=queues yet")
    assert "docs/sharding.md" in message
    assert every_key(redis_cluster) == []  # nothing written, on any master


def _aio_unique() -> None:
    async def push() -> None:
        try:
            await unique_job.aio.perform_async(1)
        finally:
            await cogworker.aio.close()

    asyncio.run(push())


def _chain_of_group() -> None:
    cogworker.chain(plain.s(1), cogworker.group(plain.s(2), plain.s(3)))


CASES: dict[str, tuple[str, Callable[[], Any]]] = {
    "declared_unique": ("unique jobs", lambda: unique_job.perform_async(1)),
    "set_unique": ("unique jobs", lambda: plain.set(unique="until_executed").perform_async(1)),
    "unique_in": ("unique jobs", lambda: unique_job.perform_in(60, 1)),
    "unique_bulk": ("unique jobs", lambda: cogworker.push_bulk(unique_job, [(1,), (2,)])),
    "unique_build": ("unique jobs", lambda: unique_job.build((1,), {})),
    "unique_aio": ("unique jobs", _aio_unique),
    "chain": ("chains", lambda: cogworker.chain(plain.s(1), plain.s(2))),
    "chain_of_group": ("chains", _chain_of_group),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_at_the_call_and_nothing_written(api: None, redis_cluster: RedisCluster, case: str) -> None:
    feature, call = CASES[case]
    _refused(feature, call, redis_cluster)


def test_a_periodic_entry_is_refused_once_the_layout_is_bound(api: None, redis_cluster: RedisCluster) -> None:
    before = periodic_module.entries()
    with pytest.raises(shards.NotShardedYet, match=r"^periodic jobs can't be used"):
        cogworker.periodic("* * * * *", name="refused-entry")(plain)
    assert periodic_module.entries() == before
    assert every_key(redis_cluster) == []


def test_a_plain_push_beside_the_refusals_still_lands(api: None, cluster: redis.RedisCluster) -> None:
    jid = plain.set(unique=None).perform_async(1)  # uniqueness turned off for this push: not refused
    assert queued(cluster, shards.Partition("refusals", 0)) == [jid]


def test_a_sharded_worker_with_a_periodic_entry_refuses_to_start(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    env = sharded_env(redis_cluster, COGWORKER_REQUIRE="tick_periodic")
    done = run_cogworker(env, "run", timeout=60)
    assert done.returncode == exitcodes.BOOT_ERROR, done.stderr
    assert "periodic jobs can't be used with COGWORKER_CLUSTER_SHARDING=queues yet" in done.stderr
    assert not [k for k in every_key(redis_cluster) if "periodic" in k]
