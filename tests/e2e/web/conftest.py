"""Fixtures for the Web UI's browser tests, shared per module to keep the folder quick: one private
redis-server, one chromium, one `cogworker web` and (for the modules that ask) one real swarm.

A module's tests share its Redis and swarm, so each test uses its own tags, queues and jids instead of
flushing (a flush would also wipe the swarm's presence records). When a test fails, the tails of the
UI server's and the swarm's logs are printed with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import Browser

from cogworker.api import client as cw_client
from cogworker.settings import Settings, load_settings
from tests.support.browser import Watched, launched, watched_page
from tests.support.redis_server import RedisServer
from tests.support.swarm import Swarm, SwarmRunner
from tests.support.web_server import WebServer, cogworker_web


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: Any = outcome.get_result()
    if report.when == "call" and report.failed:
        for name in ("ui", "swarm"):
            found = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(found, WebServer | Swarm):
                report.sections.append((f"{name} log (last lines)", found.tail()))


@pytest.fixture(scope="module")
def web_redis() -> Iterator[RedisServer]:
    with contextlib.closing(RedisServer()) as server:
        yield server


@pytest.fixture
def rc(web_redis: RedisServer) -> Iterator[redis.Redis]:
    """A client of the module's Redis (not flushed: the module's swarm lives there)."""
    with contextlib.closing(web_redis.client()) as client:
        yield client


@pytest.fixture
def web_settings(web_redis: RedisServer) -> Settings:
    """The job API pointed at the module's Redis (the root conftest resets it after every test)."""
    settings = load_settings(redis_url=web_redis.url)
    cw_client.configure(settings)
    return settings


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as found:
        yield found


@pytest.fixture(scope="module")
def ui(web_redis: RedisServer) -> Iterator[WebServer]:
    with cogworker_web(web_redis.url) as server:
        yield server


@pytest.fixture
def page(browser: Browser, ui: WebServer) -> Iterator[Watched]:
    with watched_page(browser, ui.url) as found:
        yield found


@pytest.fixture(scope="module")
def swarm(
    request: pytest.FixtureRequest, web_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swarm]:
    """A real `cogworker-swarm` (two children, demo_jobs) on the module's Redis; a module may add
    settings in a `SWARM_ENV` dict."""
    env: dict[str, str] = getattr(request.module, "SWARM_ENV", {})
    with SwarmRunner(web_redis.url, tmp_path_factory.mktemp("swarm")) as runner:
        started = runner.start(**env)
        started.wait_ready()
        yield started
