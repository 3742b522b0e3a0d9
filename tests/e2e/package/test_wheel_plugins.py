"""The plugins as a user installs them: the wheel (not editable) with the `flask` and `otel` extras in
a fresh virtualenv, run from a directory outside the repository with no PYTHONPATH, against the
session's private redis-server. In it: the pytest plugin's fixtures in a user's test file (found
through the installed `pytest11` entry point), `opentelemetry-instrument` on a pushing script and on
`cogworker run` (the `opentelemetry_instrumentor` entry point) giving linked spans, and a Flask
factory app whose job reads `current_app` in a worker that found the app through FLASK_APP."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.otel_console import console_spans, of_kind
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, wait_until

pytestmark = pytest.mark.slow

PYTHON = "3.12"

USER_TESTS = """\
import json

from cogworker import job


@job
def hello(name: str) -> None:
    print("hello", name)


def test_fake(cogworker_fake):
    hello.perform_async("a")
    assert [j["args"] for j in hello.jobs] == [["a"]]


def test_redis(cogworker_redis):
    jid = hello.perform_async("b")
    assert json.loads(cogworker_redis.lindex("cogworker:queue:default", 0))["jid"] == jid
"""

JOBS = """\
import os

import redis
from flask import Flask, current_app

from cogworker import job
from cogworker.contrib.flask import init_app


def create_app():
    app = Flask(__name__)
    app.config["GREETING"] = "from the app"
    init_app(app)
    return app


@job
def greet(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:greeted", f"{tag} {current_app.config['GREETING']}")
"""

PUSH = "import sys, shop; print('jid', shop.greet.perform_async(sys.argv[1]), flush=True)"


class Venv:
    def __init__(self, root: Path, home: Path, redis_url: str) -> None:
        self.bin = root / "bin"
        self.home = home
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("COGWORKER_", "COVERAGE", "OTEL_"))
            and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        self.env.update(COGWORKER_REDIS_URL=redis_url, COGWORKER_LOG_LEVEL="warning")
        # `opentelemetry-instrument python ...` finds the program on PATH: this venv's first.
        self.env["PATH"] = os.pathsep.join([str(self.bin), self.env.get("PATH", "")])

    def run(self, *argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=self.home,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *argv: str, out: Path, **env: str) -> subprocess.Popen[bytes]:
        with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
            return subprocess.Popen(
                [str(self.bin / argv[0]), *argv[1:]],
                cwd=self.home,
                env={**self.env, **env},
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )


def stop(proc: subprocess.Popen[bytes], out: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=60) == 0, out.with_suffix(".err").read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [found] = out.glob("*.whl")
    return found


@pytest.fixture
def venv(wheel: Path, tmp_path: Path, redis_server: RedisServer) -> Venv:
    found = sorted(glob.glob(f"/root/.pyenv/versions/{PYTHON}.*/bin/python3"))
    if not found:
        pytest.fail(f"Python {PYTHON} is not installed under /root/.pyenv/versions")
    root = tmp_path / "venv"
    made = subprocess.run([found[-1], "-m", "venv", str(root)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    home = tmp_path / "home"
    home.mkdir()
    env = Venv(root, home, redis_server.url)
    installed = env.run(
        "python",
        *("-m", "pip", "install", "-q", f"{wheel}[flask,otel]"),
        *("pytest", "opentelemetry-sdk", "opentelemetry-distro"),
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return env


@pytest.mark.timeout(900)
def test_the_installed_wheel_s_plugins(venv: Venv, r: redis.Redis, tmp_path: Path) -> None:
    (venv.home / "test_user.py").write_text(USER_TESTS)
    tested = venv.run("pytest", "-q", "-p", "no:cacheprovider", "test_user.py")
    assert "2 passed" in tested.stdout, tested.stdout[-3000:] + tested.stderr[-3000:]

    (venv.home / "shop.py").write_text(JOBS)
    otel: dict[str, Any] = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    pushed = venv.run(
        "opentelemetry-instrument", "python", "-c", PUSH, "traced", COGWORKER_REQUIRE="shop", **otel
    )
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    [push] = of_kind(console_spans(pushed.stdout), "PRODUCER")

    out = tmp_path / "worker.out"
    worker = venv.start(
        "opentelemetry-instrument",
        *("cogworker", "run"),
        out=out,
        FLASK_APP="shop",
        COGWORKER_REQUIRE="cogworker.contrib.flask.worker,shop",
        OTEL_BSP_SCHEDULE_DELAY="50",
        **otel,
    )
    try:
        assert wait_until(lambda: r.lrange("test:greeted", 0, -1), timeout=60) == ["traced from the app"]
        [perform] = wait_until(lambda: of_kind(console_spans(out.read_text()), "CONSUMER"), timeout=30)
        assert perform["parent_id"] == push["context"]["span_id"]
        assert perform["context"]["trace_id"] == push["context"]["trace_id"]
    finally:
        stop(worker, out)
