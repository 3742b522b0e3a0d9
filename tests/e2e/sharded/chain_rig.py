"""What the sharded chain tests that drive the settler in this process share (test_chain_replies.py,
test_chain_group_replies.py): the real settler and scripts on the cluster, a step fetched onto this
process's list as a fetch does, a call whose first reply is lost, and the check of MONITOR's view that
each script touched only its declared keys, in one slot, under the prefix."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import scripts, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.partition_health import PartitionHealth
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.settling.settle import Settler
from cogworker.worker.settling.shard_route import ShardRoute
from tests.e2e.sharded.conftest import PREFIX
from tests.support.monitor import Command

SCRIPTS = {"EVAL", "EVALSHA"}

# Lost replies, in this process, with the real settler and scripts: each write ran, its reply was lost,
# and the retry on the job's thread sent it again.


@dataclass
class Rig:
    settler: Settler
    route: ShardRoute
    cluster: redis.RedisCluster


@pytest.fixture
def rig(api: None, cluster: redis.RedisCluster) -> Iterator[Rig]:
    settings = load_settings()
    home = cw_client.connection()
    clients = ShardClients(settings, home=home)
    route = ShardRoute(clients, "rig", Placements(), PartitionHealth(clients))
    yield Rig(Settler(RedisContext.build(settings, client=home), "", route=route), route, cluster)


def fetched(rig: Rig, queue: str) -> Work:
    """The step waiting in `queue`'s partition, moved onto this process's list as a fetch does."""
    p = shards.Partition(queue)
    raw = rig.cluster.rpop(shards.queue_key(p))
    assert raw is not None
    rig.cluster.lpush(shards.in_progress(p, "rig"), raw)
    work = Work(queue, str(raw), partition=p)
    rig.route.placements.add([work])
    return work


def once_lost(real: Callable[..., Any]) -> Callable[..., Any]:
    """`real`, whose first call runs and then loses its reply."""
    calls = [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        reply = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 1:
            raise redis.ConnectionError("reply lost")
        return reply

    return call


class LosingScript:
    """A scripts.ClientScript whose first call runs and then loses its reply."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.wrapped: Any = None

    def on(self, conn: redis.Redis) -> Any:
        if self.wrapped is None:
            self.wrapped = once_lost(self.real.on(conn))
        return self.wrapped


def check_scripts(node: redis.Redis, commands: list[Command], names: Iterable[str]) -> int:
    """The scripts `names` among `commands` (known by their SHA): each named keys of one slot, under the
    prefix, and touched (or published on) no other. Returns how many ran."""
    ours = {hashlib.sha1(scripts.source(name).encode()).hexdigest().encode() for name in names}
    declared: set[bytes] | None = None
    count = 0
    for command in commands:
        if command.name in SCRIPTS:
            body = command.args[1]
            sha = body if command.name == "EVALSHA" else hashlib.sha1(body).hexdigest().encode()
            keys_named = command.args[3 : 3 + int(command.args[2])]
            declared = set(keys_named) if sha in ours else None
            if declared is not None:
                count += 1
                assert keys_named and all(k.startswith(PREFIX.encode()) for k in keys_named), keys_named
                assert len({key_slot(k) for k in keys_named}) == 1, keys_named
        elif command.source == "lua" and declared is not None:
            if command.name == "PUBLISH":
                touched = [command.args[1]]
            else:
                found = node.command_getkeys(*command.args)
                touched = [k if isinstance(k, bytes) else str(k).encode() for k in found]
            assert set(touched) <= declared, command
    return count
