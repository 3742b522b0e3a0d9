"""The awaitable-push examples run for real: the jobs page's (docs/examples/jobs/async_push.py) pushed
from this process and run by a `cogworker run` worker, and the FastAPI page's app
(docs/examples/fastapi/signups.py) served by uvicorn, its pushes run by a worker too."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from cogworker.settings import Settings
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, wait_until
from tests.support.web_server import asgi_app
from tests.support.workers import Worker, WorkerPool

EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(EXAMPLES / "jobs"))
    yield
    for name in set(sys.modules) - before:
        if str(EXAMPLES) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


def start(workers: WorkerPool, page: str, module: str, queues: str) -> Worker:
    path = os.pathsep.join([str(EXAMPLES / page), os.environ["PYTHONPATH"]])
    return workers.start(
        PYTHONPATH=path, PYTHONUNBUFFERED="1", COGWORKER_REQUIRE=module, COGWORKER_QUEUES=queues
    )


def prints(worker: Worker, *lines: str) -> None:
    wait_until(
        lambda: all(line in worker.log_text() for line in lines),
        timeout=30,
        message=f"{lines} in the worker's output:\n{worker.log_text()[-3000:]}",
    )


@pytest.mark.usefixtures("on_path")
def test_the_jobs_page_awaitable_pushes(configured: Settings, workers: WorkerPool) -> None:
    jids = asyncio.run(importlib.import_module("async_push").push_from_async_code())
    assert len(set(jids)) == 5 and all(isinstance(jid, str) for jid in jids)
    worker = start(workers, "jobs", "mailer", "mailers,critical")
    prints(worker, "sent welcome to user 42", "sent x to user 7", "sent a to user 1", "sent b to user 2")
    assert "sent reminder" not in worker.log_text()  # due in a minute


def test_the_fastapi_page_app(redis_server: RedisServer, configured: Settings, workers: WorkerPool) -> None:
    path = os.pathsep.join([str(EXAMPLES / "fastapi"), os.environ["PYTHONPATH"]])
    with asgi_app("signups:create_app", redis_server.url, ready_path="/docs", PYTHONPATH=path) as server:
        request = urllib.request.Request(
            f"{server.url}/signups",
            data=json.dumps({"email": "ada@example.com"}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert isinstance(json.loads(response.read())["jid"], str)
        server.stop()
        assert "Traceback" not in server.tail()
    worker = start(workers, "fastapi", "signups", "mailers")
    prints(worker, "welcome sent to ada@example.com")
