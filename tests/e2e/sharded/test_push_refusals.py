"""The features the sharded layout refuses for now (their state is in the home slot and must change in
the same step as a job's ack in its partition's slot): a chain with a group step (unique jobs run:
test_unique.py; batches: test_batches.py; a chain of plain steps: test_chains.py; periodic entries:
test_periodic.py). It is refused at the user's call with shards.NotShardedYet naming the feature, and
nothing is written on any master; the plain push beside it still works."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import cogworker
import cogworker.aio
from cogworker.store import shards
from tests.e2e.sharded.pushing import configured_api, every_key, queued
from tests.support.redis_cluster import RedisCluster


@cogworker.job(queue="refusals")
def plain(n: int) -> None:
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


def _chain_of_group() -> None:
    cogworker.chain(plain.s(1), cogworker.group(plain.s(2), plain.s(3)))


CASES: dict[str, tuple[str, Callable[[], Any]]] = {
    "chain_of_group": ("a chain with a group step (cogworker.group)", _chain_of_group),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_at_the_call_and_nothing_written(api: None, redis_cluster: RedisCluster, case: str) -> None:
    feature, call = CASES[case]
    _refused(feature, call, redis_cluster)


def test_a_plain_push_beside_the_refusals_still_lands(api: None, cluster: redis.RedisCluster) -> None:
    jid = plain.perform_async(1)
    assert queued(cluster, shards.Partition("refusals", 0)) == [jid]
