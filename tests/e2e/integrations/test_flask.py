"""Flask (cogworker.contrib.flask) with a real app: tests/apps/flask_shop's factory configures the job
API from its config, its view pushes, and a real `cogworker run` worker, which finds the app through
FLASK_APP and cogworker.contrib.flask.worker, runs sync and `async def` jobs that read
`flask.current_app`, each in an app context of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import g
from flask_shop import create_app
from flask_shop.jobs import check_g_is_fresh, send_receipt, send_survey

from cogworker import testing
from cogworker.contrib import flask as cogworker_flask
from cogworker.settings import ConfigError
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import Worker, WorkerPool

WORKER_MODULES = "cogworker.contrib.flask.worker,flask_shop.jobs"


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("RECEIPTS_FILE", str(path))
    return path


def read(path: Path, count: int) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]] | None:
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= count else None

    return wait_until(found, timeout=30, message=f"{count} lines in {path}")  # type: ignore[no-any-return]


def start_worker(workers: WorkerPool, flask_app: str, **env: str) -> Worker:
    return workers.start(
        FLASK_APP=flask_app,
        COGWORKER_REQUIRE=WORKER_MODULES,
        COGWORKER_QUEUES="receipts",
        COGWORKER_POLL_INTERVAL_S="0.1",
        **env,
    )


def test_a_view_pushes_and_a_worker_runs_the_jobs_in_the_app_context(
    r: redis.Redis, redis_server: RedisServer, workers: WorkerPool, receipts: Path
) -> None:
    app = create_app(COGWORKER_REDIS_URL=redis_server.url)
    response = app.test_client().post("/orders/7?to=ann")
    assert response.status_code == 200
    jid = response.get_json()["jid"]
    assert json.loads(r.lindex("cogworker:queue:receipts", 0) or "{}")["jid"] == jid
    survey = send_survey.perform_async(7)
    fresh = check_g_is_fresh.perform_async()
    # One job thread: the third job would see the first one's `g` if its context had leaked.
    worker = start_worker(workers, "flask_shop", COGWORKER_CONCURRENCY="1")
    done = {line["jid"]: line for line in read(receipts, 3)}
    assert done[jid] == {
        "jid": jid,
        "kind": "sync",
        "text": "the corner shop: receipt for order 7 to ann",
        "app": "flask_shop",
    }
    assert done[survey]["text"] == "the corner shop: survey for order 7"
    assert done[fresh]["text"] == "None"
    assert worker.stop() == 0


def test_a_worker_refuses_an_app_whose_config_disagrees_with_its_environment(
    r: redis.Redis, workers: WorkerPool, receipts: Path
) -> None:
    worker = start_worker(workers, "flask_shop:create_app(COGWORKER_KEY_PREFIX='elsewhere')")
    assert worker.proc.wait(timeout=30) == 3
    assert "COGWORKER_KEY_PREFIX to another value than this worker's environment" in worker.log_text()
    assert "elsewhere" not in worker.log_text()  # named, never shown


def test_the_environment_wins_over_the_app_config(
    r: redis.Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_server.url)
    app = create_app(COGWORKER_REDIS_URL="redis://127.0.0.1:1/0", COGWORKER_QUEUES="receipts")
    assert app.extensions["cogworker"].redis_url == redis_server.url
    jid = app.test_client().post("/orders/8").get_json()["jid"]
    assert json.loads(r.lindex("cogworker:queue:receipts", 0) or "{}")["jid"] == jid
    assert cogworker_flask.overrides(app.config) == {"queues": "receipts"}


def test_a_key_that_is_no_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"app.config\['COGWORKER_REDIS_ULR'\] is not a cogworker setting"):
        create_app(COGWORKER_REDIS_ULR="redis://127.0.0.1:1/0")


def test_in_inline_mode_a_job_runs_in_the_app_context_current_or_a_fresh_one(
    redis_server: RedisServer, receipts: Path
) -> None:
    app = create_app(COGWORKER_REDIS_URL=redis_server.url, SHOP_NAME="the test shop")
    with testing.inline():
        response = app.test_client().post("/orders/9")  # run inside the view's context
        with app.app_context():
            send_receipt.perform_async(10, "bob")
            assert g.sent_by == "worker"  # the job ran in this very context: its `g` is ours
        send_survey.perform_async(11)  # no context current: the middleware pushes the app's
    assert response.status_code == 200
    texts = [line["text"] for line in read(receipts, 3)]
    assert texts == [
        "the test shop: receipt for order 9 to customer",
        "the test shop: receipt for order 10 to bob",
        "the test shop: survey for order 11",
    ]
