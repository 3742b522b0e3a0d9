"""The Sidekiq-mode tests' fixtures: swarms on the test's private Redis, ended at teardown, which fails
on any process left behind (tests/support/swarm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer
from tests.support.swarm import SwarmRunner, swarm_runner


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)
