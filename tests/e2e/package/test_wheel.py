"""The wheel as a user gets it: built once from the sdist (as `make dist` builds them), installed
(not editable) into a fresh virtualenv for each Python version the classifiers name, and run from a
directory outside the repository with no PYTHONPATH, so only what the wheel ships is there. In each:
a job pushed by `cogworker enqueue` and run by `cogworker run MODULE -Q ... -c ...`, one run by
`cogworker-swarm`, a Web UI page served by `cogworker web`, all against the session's private
redis-server.

The virtualenvs install their dependencies through pip as a user's would (its wheel cache keeps a
re-run short); only the `web` extra, the one these commands need.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
import redis

import cogworker
from cogworker import exitcodes
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, free_port, wait_until

pytestmark = pytest.mark.slow

# The versions the classifiers in pyproject.toml name; each must be on the machine (pyenv's layout).
PYTHONS = ("3.11", "3.12", "3.13")
KIT = ("cogworker@.service", "cogworker.target", "cogworker.env.example", "install.sh")

APP = """\
import logging
import os

import redis

from cogworker import job


@job
def where(tag: str) -> None:
    logging.getLogger("wheel_app").warning("running %s", tag)
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:where", f"{tag} {os.getpid()}")
"""


def interpreter(version: str) -> Path:
    found = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python3"))
    if not found:
        pytest.fail(
            f"Python {version} is not installed under /root/.pyenv/versions: the wheel is not tested on it"
        )
    return Path(found[-1])


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), the wheel built from the sdist as `python -m build` does by default."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


def test_the_archives_carry_what_the_installed_commands_and_the_source_release_need(
    dist: tuple[Path, Path],
) -> None:
    sdist, wheel = dist
    version = cogworker.__version__
    assert wheel.name == f"cogworker_redis-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {f"cogworker/deploy_kit/{name}" for name in KIT} <= names
    assert {"cogworker/py.typed", "supervisor/py.typed"} <= names
    assert f"cogworker_redis-{version}.dist-info/licenses/LICENSE" in names
    assert not any(name.startswith("tests/") for name in names)

    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    shipped = [name for name in ("LICENSE", "README.md", "CHANGELOG.md") if (ROOT / name).exists()]
    assert {"LICENSE", *shipped, "tests/conftest.py", "MANIFEST.in"} <= members
    assert {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md")} <= members
    assert "cogworker/deploy_kit/install.sh" in members


class Venv:
    """A fresh virtualenv with the wheel installed, whose commands run in `home` (outside the repo)."""

    def __init__(self, root: Path, home: Path, redis_url: str) -> None:
        self.bin = root / "bin"
        self.home = home
        # No PYTHONPATH (conftest.py puts the checkout on it), no settings of the test run's own.
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("COGWORKER_", "COVERAGE")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        self.env.update(
            COGWORKER_REDIS_URL=redis_url, COGWORKER_REQUIRE="wheel_app", COGWORKER_LOG_LEVEL="warning"
        )

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *argv: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [str(self.bin / argv[0]), *argv[1:]],
                cwd=self.home,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


@pytest.fixture(params=PYTHONS)
def venv(
    request: pytest.FixtureRequest, dist: tuple[Path, Path], tmp_path: Path, redis_server: RedisServer
) -> Venv:
    python = interpreter(request.param)
    root = tmp_path / "venv"
    made = subprocess.run([str(python), "-m", "venv", str(root)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    home = tmp_path / "home"
    home.mkdir()
    (home / "wheel_app.py").write_text(APP)
    env = Venv(root, home, redis_server.url)
    _, wheel = dist
    installed = env.run("python", "-m", "pip", "install", "-q", f"{wheel}[web]", timeout=400)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return env


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, and the command must exit 0 within its drain."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{proc.args} did not stop on SIGTERM: {log.read_text(errors='replace')}")
    assert code == exitcodes.OK, log.read_text(errors="replace")


def ran(r: redis.Redis, tag: str, proc: subprocess.Popen[bytes], log: Path) -> int:
    """The pid that ran job `tag`, once it has run (failing early if `proc` exits first)."""

    def look() -> str | None:
        line = next((x for x in r.lrange("test:where", 0, -1) if x.split()[0] == tag), None)
        if line is None and proc.poll() is not None:
            pytest.fail(f"{proc.args} exited {proc.returncode}: {log.read_text(errors='replace')}")
        return line

    line: str = wait_until(look, timeout=60, message=f"job {tag} to run")
    return int(line.split()[1])


@pytest.mark.timeout(900)
def test_the_installed_wheel_runs_jobs_and_serves_the_web_ui(
    venv: Venv, r: redis.Redis, tmp_path: Path
) -> None:
    where = venv.run(
        "python", "-c", "import sys, cogworker, supervisor; print(cogworker.__file__); print(sys.path)"
    )
    assert where.returncode == 0, where.stderr
    module_file, path = where.stdout.splitlines()
    assert Path(module_file).is_relative_to(venv.bin.parent), module_file
    assert str(ROOT) not in path
    for command in (["cogworker"], ["cogworker-swarm"], ["cogworker", "swarm"]):
        version = venv.run(*command, "--version")
        assert (version.returncode, version.stdout) == (
            0,
            f"{' '.join(command)} {cogworker.__version__}\n",
        ), version.stderr
    shown = venv.run("cogworker", "settings", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["settings"]["require"]["source"] == "environment"
    # The installed help points at these (the archive test checks that all four ship).
    for verb, name in (("print-unit", "cogworker@.service"), ("print-env", "cogworker.env.example")):
        printed = venv.run("cogworker", "deploy", verb)
        assert printed.stdout == (ROOT / "cogworker" / "deploy_kit" / name).read_text(), printed.stderr

    # Pushed by `cogworker enqueue`, which imports the app from the current directory, to a queue
    # only the worker's options name; the worker is given its module as an argument, not a setting.
    pushed = venv.run("cogworker", "enqueue", "wheel_app.where", '["by-run"]', "--queue", "wheel")
    assert pushed.returncode == 0 and "warning" not in pushed.stderr, pushed.stderr
    log = tmp_path / "run.log"
    require = venv.env.pop("COGWORKER_REQUIRE")
    worker = venv.start("cogworker", "run", "wheel_app", "-Q", "wheel,default", "-c", "2", log=log)
    assert ran(r, "by-run", worker, log) == worker.pid
    stop(worker, log)
    venv.env["COGWORKER_REQUIRE"] = require
    assert job_line(log, "running by-run", "wheel")["pid"] == worker.pid

    # An awaitable push from the installed package (cogworker.aio, redis.asyncio) pushes the next job.
    apush = "import asyncio, sys, wheel_app; asyncio.run(wheel_app.where.aio.perform_async(sys.argv[1]))"
    pushed = venv.run("python", "-c", apush, "by-swarm")
    assert pushed.returncode == 0, pushed.stderr
    log = tmp_path / "swarm.log"
    venv.env["COGWORKER_COUNT"] = "1"
    swarm = venv.start("cogworker-swarm", log=log)
    assert ran(r, "by-swarm", swarm, log) != swarm.pid  # a child of the swarm ran it
    stop(swarm, log)
    assert job_line(log, "running by-swarm", "default")["slot"] == 0

    port = free_port()
    log = tmp_path / "web.log"
    web = venv.start("cogworker", "web", "--port", str(port), log=log)
    try:
        page = wait_until(
            lambda: fetch(f"http://127.0.0.1:{port}/", web, log), timeout=60, message="the Web UI"
        )
        assert "<html" in page.lower() and "cogworker" in page.lower()
    finally:
        stop(web, log)

    # The Sidekiq mode from the installed package: pushes for a Ruby class, by the API and the CLI, land
    # in Sidekiq's bare queue with what Sidekiq reads (and no empty kwargs).
    venv.env["COGWORKER_SIDEKIQ_COMPAT"] = "7"
    named = "import cogworker; print(cogworker.push_named('HardWorker', [1, 'a'], queue='ruby'))"
    by_api = venv.run("python", "-c", named)
    by_cli = venv.run("cogworker", "enqueue", "HardWorker", '[2, "b"]', "--queue", "ruby")
    assert by_api.returncode == 0 and by_cli.returncode == 0, by_api.stderr + by_cli.stderr
    pushed_jobs = [json.loads(raw) for raw in r.lrange("queue:ruby", 0, -1)]
    assert sorted((job["class"], job["args"][0]) for job in pushed_jobs) == [
        ("HardWorker", 1),
        ("HardWorker", 2),
    ]
    assert by_api.stdout.strip() in {job["jid"] for job in pushed_jobs}
    assert not any("kwargs" in job or "at" in job for job in pushed_jobs)
    assert r.sismember("queues", "ruby")


def job_line(log: Path, event: str, queue: str) -> dict[str, Any]:
    """The job's own stdlib line `event`: a JSON line (stderr is a file) with the job's fields, the
    job pushed to `queue`."""
    lines = [json.loads(x) for x in log.read_text(errors="replace").splitlines() if f'"{event}"' in x]
    assert len(lines) == 1, log.read_text(errors="replace")
    [line] = lines
    assert (line["job"], line["queue"], line["level"], line["logger"]) == (
        "wheel_app.where",
        queue,
        "warning",
        "wheel_app",
    )
    assert isinstance(line["jid"], str) and line["jid"]
    return line


def fetch(url: str, proc: subprocess.Popen[bytes], log: Path) -> str | None:
    """The page's HTML, or None while the server isn't listening yet."""
    if proc.poll() is not None:
        pytest.fail(f"cogworker web exited {proc.returncode}: {log.read_text(errors='replace')}")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
            return str(response.read().decode())
    except (ConnectionError, urllib.error.URLError):
        return None
