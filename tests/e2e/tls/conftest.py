"""Fixtures for the TLS + ACL tests: one TLS-only redis-server per module (tests/support/tls_redis.py),
flushed before each test through its admin user; cogworker's processes connect as the `app` ACL user.

Every test ends by asking the server what its ACL refused the `app` user (ACL LOG): a command missing
from the README's list shows up there even where cogworker tolerates the refusal.

The cluster folder's conftest has the same environment, `workers` and `swarms` fixtures over its own
server; what differs is the server and the check that ends each test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.daemon_env import use_only
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.tls_redis import TlsRedis
from tests.support.workers import WorkerPool, worker_pool


@pytest.fixture(scope="module")
def tls_redis() -> Iterator[TlsRedis]:
    with contextlib.closing(TlsRedis()) as server:
        yield server


@pytest.fixture
def admin(tls_redis: TlsRedis) -> Iterator[redis.Redis]:
    """The server's all-powerful user, flushed before the test; checks the ACL refused nothing after it."""
    client = tls_redis.admin()
    client.flushall()
    client.acl_log_reset()
    with contextlib.closing(client):
        yield client
        assert tls_redis.refused() == [], "the ACL refused cogworker a command the README's list lacks"


@pytest.fixture
def tls_env(tls_redis: TlsRedis, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment set for the TLS server only (the in-process CLI and Web UI read it)."""
    return use_only(monkeypatch, tls_redis.env(COGWORKER_REQUIRE="tls_jobs", COGWORKER_LOG_FORMAT="json"))


@pytest.fixture
def workers(tls_redis: TlsRedis, admin: redis.Redis) -> Iterator[WorkerPool]:
    yield from worker_pool(tls_redis.url())


@pytest.fixture
def swarms(tls_redis: TlsRedis, admin: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(tls_redis.url(), tmp_path)
