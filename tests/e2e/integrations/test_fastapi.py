"""The FastAPI lifespan (cogworker/contrib/fastapi.py) in a real app (tests/apps/fastapi_shop.py)
served by uvicorn: requests over HTTP push typed jobs a real worker runs, the Web UI answers under its
mount, the app stops cleanly; in-process, the lifespan configures the client and closes its pool."""

from __future__ import annotations

import json
import signal
import urllib.request
import uuid
from typing import Any

import pytest
import redis

import cogworker
from cogworker.api import client
from cogworker.settings import Settings
from tests.support.redis_server import RedisServer, wait_until
from tests.support.web_server import asgi_app
from tests.support.workers import WorkerPool

pytest.importorskip("fastapi")

BODY = {
    "order": {"id": str(uuid.uuid4()), "total": "12.50", "ship_to": {"street": "9 Elm", "zip": "10001"}},
    "window": {"start": "2026-06-01T10:00:00Z", "end": "2026-06-01T12:00:00Z"},
}


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_requests_push_jobs_a_worker_runs(
    redis_server: RedisServer, r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    workers.start(COGWORKER_REQUIRE="typed_jobs", COGWORKER_QUEUES="typed")
    with asgi_app("fastapi_shop:create_app", redis_server.url, ready_path="/jobs/") as server:
        jids = [post(f"{server.url}/shipments", BODY) for _ in range(3)]
        assert all(status == 200 for status, _ in jids)
        for _, body in jids:
            result = cogworker.result(body["jid"], timeout=30)
            assert result["zip"] == "10001" and result["total"] == "12.51" and result["hours"] == 2.0
        status, error = post(f"{server.url}/shipments", {"order": {"id": "x"}, "window": BODY["window"]})
        assert status == 422  # FastAPI's own validation: nothing pushed
        assert ["body", "order", "id"] in [e["loc"] for e in error["detail"]]
        with urllib.request.urlopen(f"{server.url}/jobs/", timeout=10) as page:
            assert page.status == 200 and b"cogworker" in page.read()
        server.stop()
        # uvicorn re-raises the SIGTERM it handled once its shutdown (the lifespan's exit) is done.
        assert server.proc.returncode in (0, -signal.SIGTERM)
        assert "Traceback" not in server.tail()
    assert r.zcard("cogworker:retry") == 0 and r.zcard("cogworker:dead") == 0


def test_the_lifespan_configures_the_client_and_closes_its_pool(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from cogworker.contrib.fastapi import lifespan
    from cogworker.settings import load_settings

    def ours() -> int:
        return sum(1 for c in r.client_list() if c.get("name") == "lifespan-test")

    settings = load_settings(redis_url=f"{redis_server.url}?client_name=lifespan-test")
    app = FastAPI(lifespan=lambda app: lifespan(app, settings=settings))

    @app.get("/ping")
    def ping() -> bool:
        return bool(client.connection().ping())

    with TestClient(app) as http:
        assert http.get("/ping").json() is True
        assert client.settings() is settings
        assert ours() >= 1
    wait_until(lambda: ours() == 0, timeout=10, message="the pool's connections closed")
