"""With COGWORKER_KEY_PREFIX={myapp}: every key and channel of a deployment is in one hash slot (what
Redis Cluster needs), and every Lua script touches only the keys it declared in KEYS.

A real swarm runs a full mix (push, bulk push, scheduled, retry, dead and death notices, unique,
status, result, periodic with its running lock, cancel, a batch with a dead member, a child killed
mid-job and recovered, an orphan of a dead process, a batch member cancelled as its process died,
a wrong-type key quarantined, a chain with a group, the CLI's verbs) while MONITOR records every
command Redis runs. Then: every key left in Redis, and every key and channel any command named,
starts with the prefix and hashes to the prefix's slot; every script was given at least one key; and
every command a script ran touched only keys the script was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from tests.support.full_mix import APP_KEYS, Layout, key_use, run_everything
from tests.support.monitor import Monitor
from tests.support.redis_server import RedisServer
from tests.support.swarm import SwarmRunner, swarm_runner

pytestmark = pytest.mark.slow

PREFIX = "{myapp}:"
SLOT = key_slot(PREFIX.encode())
LAYOUT = Layout(own=PREFIX, shared=PREFIX, env={"COGWORKER_KEY_PREFIX": PREFIX})


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)


@pytest.mark.timeout(240)
def test_every_key_is_in_the_prefixs_slot_and_scripts_touch_only_declared_keys(
    private_redis: RedisServer, swarms: SwarmRunner
) -> None:
    url = private_redis.url
    r = private_redis.client()
    monitor = Monitor(url)
    try:
        run_everything(url, r, swarms, LAYOUT)
    finally:
        commands = monitor.stop()

    left = [str(k) for k in r.keys("*") if not str(k).startswith(APP_KEYS.decode())]
    assert len(left) > 15, left
    assert [k for k in left if not k.startswith(PREFIX) or key_slot(k.encode()) != SLOT] == []
    assert [k for k in left if k.startswith("cogworker:")] == []

    use = key_use(url, commands)
    assert use.scripts_run > 50 and len(use.named) > 30
    assert use.keyless_scripts == []
    assert use.undeclared == []
    assert [k for k in use.named if not k.startswith(PREFIX.encode()) or key_slot(k) != SLOT] == []
    r.close()
