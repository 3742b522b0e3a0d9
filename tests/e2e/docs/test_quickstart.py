"""The docs site's quickstart (docs/index.md, docs/getting-started.md), as a reader runs it: the two
files of docs/examples/quickstart/ copied into an empty folder, the FastAPI app under uvicorn pushing
a job on POST /signup/42, and the job run by `cogworker run jobs`, then by
`COGWORKER_REQUIRE=jobs cogworker swarm`, each started in that folder with no PYTHONPATH: the commands
import the app from the current directory, as the page says."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.web_server import WebServer, free_port

pytest.importorskip("fastapi")

EXAMPLE = ROOT / "docs" / "examples" / "quickstart"
BIN = Path(sys.executable).parent
WELCOME = "Welcome, user 42!"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder holding only the page's two files."""
    app = tmp_path / "app"
    app.mkdir()
    for name in ("jobs.py", "web.py"):
        shutil.copy(EXAMPLE / name, app / name)
    return app


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)


def reader_env(redis_url: str) -> dict[str, str]:
    """The reader's shell: the settings the page names, no PYTHONPATH (the tests' own apps are not
    there to be found), and output line-buffered as on the reader's terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_") and k != "PYTHONPATH"}
    return env | {"COGWORKER_REDIS_URL": redis_url, "COGWORKER_REQUIRE": "jobs", "PYTHONUNBUFFERED": "1"}


def sign_up(server: WebServer) -> str:
    request = urllib.request.Request(f"{server.url}/signup/42", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        jid = json.loads(response.read())["jid"]
    assert isinstance(jid, str)
    return jid


@pytest.fixture
def web(folder: Path, private_redis: RedisServer) -> Iterator[WebServer]:
    """`uvicorn web:app` in the folder (uvicorn imports from its current directory)."""
    port = free_port()
    command = [str(BIN / "uvicorn"), "web:app", "--host", "127.0.0.1", "--port", str(port)]
    env = reader_env(private_redis.url)
    # WebServer starts its process in the test's directory; the reader's is the folder.
    command = ["sh", "-c", f'cd "{folder}" && exec "$@"', "sh", *command]
    server = WebServer(command, port, env, ready_path="/docs")
    try:
        yield server
    finally:
        server.close()


def test_a_signup_pushes_a_job_cogworker_run_runs(
    folder: Path, private_redis: RedisServer, web: WebServer
) -> None:
    sign_up(web)
    log = folder.parent / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(BIN / "cogworker"), "run", "jobs"],
            cwd=folder,
            env={k: v for k, v in reader_env(private_redis.url).items() if k != "COGWORKER_REQUIRE"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def welcomed() -> bool:
        if worker.poll() is not None:
            raise AssertionError(f"cogworker run exited with {worker.returncode}:\n{log.read_text()}")
        return WELCOME in log.read_text()

    try:
        wait_until(welcomed, timeout=30, message=f"{WELCOME!r} in the worker's output")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    # The job's own logging line, as the page says: a JSON line (not a terminal) with the job's fields.
    line = json.loads(next(text for text in log.read_text().splitlines() if WELCOME in text))
    assert line["event"] == WELCOME and line["level"] == "info", line
    assert line["job"] == "jobs.send_welcome" and line["queue"] == "default" and line["jid"], line


def test_a_signup_pushes_a_job_the_swarm_runs(
    folder: Path, private_redis: RedisServer, web: WebServer, swarms: SwarmRunner
) -> None:
    sign_up(web)
    env = reader_env(private_redis.url) | {"PYTHONPATH": "", "COGWORKER_COUNT": "2"}
    swarm = swarms.start(command=[str(BIN / "cogworker"), "swarm"], cwd=folder, **env)
    wait_until(
        lambda: WELCOME in swarm.log_path.read_text(), timeout=60, message=f"{WELCOME!r}:\n{swarm.tail()}"
    )
    swarm.proc.send_signal(signal.SIGTERM)
    assert swarm.proc.wait(timeout=30) == 0, swarm.tail()
