"""Fixtures: a real redis-server for the session, throwaway ones for fault tests, clean state."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import cogworker
from cogworker import logs, testing
from cogworker.api import client as cw_client
from cogworker.api import death, middleware
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from tests.support.paths import APP_DIR, ROOT
from tests.support.redis_server import RedisServer
from tests.support.resp_proxy import RespProxy
from tests.support.workers import WorkerPool, worker_pool

# Test apps (job modules) live in tests/apps; child processes find them through PYTHONPATH.
sys.path.insert(0, str(APP_DIR))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(APP_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with contextlib.closing(RedisServer()) as server:
        yield server


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's Redis, flushed before each test."""
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()
    with contextlib.closing(redis_server.client()) as client:
        client.flushall()
        yield client


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A throwaway redis-server a test may stop, restart or SIGSTOP."""
    with contextlib.closing(RedisServer()) as server:
        yield server


@pytest.fixture
def resp_proxy(private_redis: RedisServer) -> Iterator[RespProxy]:
    """A fault-injecting proxy (tests/support/resp_proxy.py) in front of `private_redis`: point a
    client or a worker at `resp_proxy.url`, arm faults on it, check the data on `private_redis`."""
    with contextlib.closing(RespProxy(private_redis.port)) as proxy:
        yield proxy


@pytest.fixture
def settings(redis_server: RedisServer, r: redis.Redis) -> Settings:
    return load_settings(redis_url=redis_server.url)


@pytest.fixture(autouse=True)
def _clean_globals() -> Iterator[None]:
    logs.configure("debug", "json")
    # No on_death hook registered by an imported job module (tests/apps) leaks into another test.
    hooks_before = death.hooks()
    death.clear()
    yield
    death.clear()
    for hook in hooks_before:
        death.on_death(hook)
    testing.set_mode(None)
    testing.clear_all()
    # Back to the chains as `import cogworker` leaves them: the built-in middleware only.
    middleware.client_chain.entries.clear()
    middleware.server_chain.entries.clear()
    cogworker.install_builtin_middleware()
    cw_client.reset_after_fork()
    cw_client._settings = None
    # A test that used another COGWORKER_KEY_PREFIX must not leave it to the next one.
    keys.use_prefix(keys.DEFAULT_PREFIX)


@pytest.fixture
def configured(settings: Settings) -> Settings:
    """The job API pointed at the session's Redis."""
    cw_client.configure(settings)
    return settings


@pytest.fixture
def workers(redis_server: RedisServer, r: redis.Redis) -> Iterator[WorkerPool]:
    yield from worker_pool(redis_server.url)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A unix socket path holds at most 107 bytes; pytest's tmp_path can be longer than that.
    path = Path(tempfile.mkdtemp(prefix="cwn-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
