"""Fixtures for the TLS + ACL tests: one TLS-only redis-server per module (tests/support/tls_redis.py),
flushed before each test through its admin user; cogworker's processes connect as the `app` ACL user.

Every test ends by asking the server what its ACL refused the `app` user (ACL LOG): a command missing
from the README's list shows up there even where cogworker tolerates the refusal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.tls_redis import TlsRedis
from tests.support.workers import WorkerPool


@pytest.fixture(scope="module")
def tls_redis() -> Iterator[TlsRedis]:
    server = TlsRedis()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def admin(tls_redis: TlsRedis) -> Iterator[redis.Redis]:
    """The server's all-powerful user, flushed before the test; checks the ACL refused nothing after it."""
    client = tls_redis.admin()
    client.flushall()
    client.acl_log_reset()
    try:
        yield client
        assert tls_redis.refused() == [], "the ACL refused cogworker a command the README's list lacks"
    finally:
        client.close()


@pytest.fixture
def tls_env(tls_redis: TlsRedis, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment set for the TLS server only (the in-process CLI and Web UI read it)."""
    for name in list(os.environ):
        if name.startswith("COGWORKER_"):
            monkeypatch.delenv(name)
    env = tls_redis.env(COGWORKER_REQUIRE="tls_jobs", COGWORKER_LOG_FORMAT="json")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def workers(tls_redis: TlsRedis, admin: redis.Redis) -> Iterator[WorkerPool]:
    pool = WorkerPool(tls_redis.url())
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def swarms(tls_redis: TlsRedis, admin: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(tls_redis.url(), tmp_path)
