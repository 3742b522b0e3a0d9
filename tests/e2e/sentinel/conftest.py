"""Fixtures for the Sentinel tests: a fresh deployment per test (a master, a replica, three sentinels:
tests/support/sentinel_redis.py), since a failover test leaves another node the master."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sentinel_redis import SentinelRedis
from tests.support.swarm import SwarmRunner, swarm_runner


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[SentinelRedis]:
    found = SentinelRedis()
    try:
        yield found
    finally:
        # The servers' and sentinels' logs (+switch-master, +convert-to-slave...) stay with the test's.
        (tmp_path / "sentinel-deployment.log").write_text(found.log_text())
        found.close()


@pytest.fixture
def swarms(deployment: SentinelRedis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(deployment.url, tmp_path)
