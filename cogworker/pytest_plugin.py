"""pytest fixtures for apps that use cogworker, loaded by pytest wherever cogworker is installed (the
`pytest11` entry point in pyproject.toml; docs/guide/testing.md).

- `cogworker_fake`: the fake testing mode for the test (pushes recorded, `job.drain()` runs them).
- `cogworker_inline`: the inline testing mode for the test (a push runs the job at once).
- `cogworker_redis_url`: the URL of a private redis-server, started on a free port the first time a
  test of the session asks for it and emptied before each test that asks (private_redis.py).
- `cogworker_redis`: that Redis with the job API pointed at it for the test; a client of it.

pytest imports this module in every run of every project that has cogworker installed, asked or not.
So it imports nothing but pytest at the top: the testing modes, the Redis client and the settings
are imported by the fixture that needs them, and a run that uses none of them never loads them.
`-p no:cogworker` turns the plugin off.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import redis

    from cogworker.private_redis import PrivateRedis


@pytest.fixture
def cogworker_fake() -> Iterator[ModuleType]:
    """Fake mode for the test: every push is recorded instead of sent; nothing touches Redis.

    Yields:
        `cogworker.testing`: `cogworker_fake.drain_all()`, `.all_jobs()`, `.clear_all()`; a job's
        own `job.jobs`, `job.drain()` and `job.perform_one()` work too. Recorded pushes and kept
        results are forgotten afterwards.
    """
    from cogworker import testing

    with testing.fake():
        yield testing


@pytest.fixture
def cogworker_inline() -> Iterator[ModuleType]:
    """Inline mode for the test: each push runs its job at once, in the test's thread, through the
    server middleware chain; the job's exception propagates to the push.

    Yields:
        `cogworker.testing`.
    """
    from cogworker import testing

    with testing.inline():
        yield testing


@pytest.fixture(scope="session")
def cogworker_redis_server() -> Iterator[PrivateRedis]:
    """A redis-server of the session's own, on a free port of 127.0.0.1 (never 6379); stopped when
    the session ends. Fails the tests that ask for it when no `redis-server` is on PATH."""
    from cogworker.private_redis import PrivateRedis, RedisServerMissing

    try:
        server = PrivateRedis()
    except RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cogworker_redis_url(cogworker_redis_server: PrivateRedis) -> str:
    """The URL of the session's private Redis (`redis://127.0.0.1:<port>/0`), emptied for this test.

    Returns:
        The URL: give it to a worker (`COGWORKER_REDIS_URL`) or to `cogworker.load_settings`.
    """
    cogworker_redis_server.flush()
    return cogworker_redis_server.url


@pytest.fixture
def cogworker_redis(cogworker_redis_server: PrivateRedis, cogworker_redis_url: str) -> Iterator[redis.Redis]:
    """The private Redis, with the job API (pushes, results, statuses) pointed at it for the test.

    Yields:
        A client of that Redis, replies decoded to `str`: look at what a push wrote. Afterwards the
        job API is pointed back where it was.
    """
    from cogworker.api import client
    from cogworker.settings import ConfigError, load_settings

    try:
        before = client.settings()
    except ConfigError:  # the environment's settings are invalid: nothing to point back to
        before = None
    client.configure(load_settings(redis_url=cogworker_redis_url))
    conn = cogworker_redis_server.client()
    try:
        yield conn
    finally:
        conn.close()
        client.close()
        if before is not None:
            client.configure(before)
