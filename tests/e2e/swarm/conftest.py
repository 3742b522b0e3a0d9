"""The swarm tests' `swarms` fixture: swarms started on the test's private Redis, ended at teardown,
which fails on any process left behind (tests/support/swarm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import RedisServer
from tests.support.swarm import SwarmRunner, swarm_runner


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)
