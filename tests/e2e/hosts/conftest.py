"""Fixtures for the many-hosts tests: three simulated hosts (network namespaces, tests/support/
netns_hosts.py) each running a 2-child swarm against one private Redis. Root and `ip` are needed
(CI has both); elsewhere every test here is skipped with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.many_hosts import ManyHosts
from tests.support.netns_hosts import unavailable


@pytest.fixture
def many_hosts(tmp_path: Path) -> Iterator[ManyHosts]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    hosts = ManyHosts(tmp_path)
    try:
        hosts.boot()
        yield hosts
    finally:
        hosts.close()
