"""`cogworker run`, `cogworker enqueue` and `cogworker swarm` as a user types them: the installed
commands, started in a folder holding the app (myapp.py) with no PYTHONPATH and only the settings
each test names, against a real Redis. The app is imported from the current directory; the options
win over the environment; every worker logs the jobs it knows at boot, or warns that it knows none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import log_events

BIN = Path(sys.executable).parent

APP = """\
import os

import redis

from cogworker import job


def record(tag: str) -> None:
    # Not COGWORKER_REDIS_URL: a test points that elsewhere to show that --redis-url wins.
    client = redis.Redis.from_url(os.environ["TEST_REDIS_URL"], decode_responses=True)
    client.rpush("test:ran", f"{tag} {os.getpid()}")


@job(queue="a")
def on_a(tag: str) -> None:
    record(tag)


@job(queue="b")
def on_b(tag: str) -> None:
    record(tag)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "myapp.py").write_text(APP)
    (folder / "nojobs.py").write_text("VALUE = 1\n")
    return folder


@pytest.fixture
def swarms(redis_server: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def user_env(redis_url: str, **settings: str) -> dict[str, str]:
    """The user's shell: no PYTHONPATH (the tests' apps are not there to be found), no COGWORKER_*
    variable but `settings`."""
    env = clean_env(settings, COGWORKER_REDIS_URL=redis_url, TEST_REDIS_URL=redis_url)
    env.pop("PYTHONPATH", None)
    env.update(settings)
    return env


def cogworker(home: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "cogworker"), *argv], cwd=home, env=env, capture_output=True, text=True, timeout=30
    )


class Running:
    """A `cogworker run` started in `home`, its output in a log file; stopped by the test."""

    def __init__(self, home: Path, env: dict[str, str], *argv: str, env_file: str | None = None) -> None:
        self.log = home.parent / "worker.log"
        first = ["--env-file", env_file] if env_file is not None else []
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "cogworker"), *first, "run", *argv],
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def event(self, name: str) -> dict[str, object]:
        def find() -> dict[str, object] | None:
            if self.proc.poll() is not None:
                pytest.fail(f"cogworker run exited {self.proc.returncode}:\n{self.log.read_text()}")
            return next((e for e in log_events(self.log) if e.get("event") == name), None)

        found: dict[str, object] = wait_until(find, timeout=30, message=f"{name} in {self.log}")
        return found

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"cogworker run didn't stop on TERM:\n{self.log.read_text()}")
        assert code == 0, self.log.read_text()


def ran(r: redis.Redis) -> dict[str, int]:
    return {tag: int(pid) for tag, pid in (line.split() for line in r.lrange("test:ran", 0, -1))}


def test_run_with_modules_queues_and_concurrency_from_the_current_directory(
    home: Path, redis_server: RedisServer, r: redis.Redis
) -> None:
    env = user_env(redis_server.url, COGWORKER_REQUIRE="myapp")
    # Pushed by name from the folder: enqueue imports myapp from the current directory, so each job
    # goes to its own @job queue, with no "can't import" warning.
    for name, tag, queue in (("myapp.on_a", "one", "a"), ("myapp.on_b", "two", "b")):
        pushed = cogworker(home, env, "enqueue", name, json.dumps([tag]))
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.startswith(f"pushed {name} to queue {queue} as "), pushed.stdout
        assert "warning" not in pushed.stderr, pushed.stderr

    # Every option against an environment that says otherwise: the options win.
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    env.update(
        COGWORKER_REDIS_URL=nowhere,
        COGWORKER_QUEUES="default",
        COGWORKER_CONCURRENCY="9",
        COGWORKER_REQUIRE="nojobs",
        COGWORKER_LOG_FORMAT="json",
        COGWORKER_LOG_LEVEL="warning",
        COGWORKER_HEARTBEAT_INTERVAL_S="0.2",
    )
    worker = Running(
        home, env, "myapp", "-Q", "a,b", "-c", "3", "--redis-url", redis_server.url, "--log-level", "debug"
    )
    try:
        wait_until(
            lambda: len(ran(r)) == 2, timeout=30, message=f"both jobs to run:\n{worker.log.read_text()}"
        )
        assert ran(r) == {"one": worker.proc.pid, "two": worker.proc.pid}
        registered = worker.event("jobs_registered")
        assert (registered["level"], registered["count"]) == ("info", 2)
        names = worker.event("jobs_registered_names")
        assert (names["level"], names["jobs"]) == ("debug", ["myapp.on_a", "myapp.on_b"])
        assert not [e for e in log_events(worker.log) if e.get("event") == "no_jobs_registered"]

        def info() -> dict[str, object] | None:
            for identity in r.smembers("cogworker:processes"):
                raw = r.hget(f"cogworker:process:{identity}", "info")
                if raw and json.loads(raw)["pid"] == worker.proc.pid:
                    found: dict[str, object] = json.loads(raw)
                    return found
            return None

        beat = wait_until(info, timeout=30, message="the worker's heartbeat")
        assert (beat["queues"], beat["concurrency"]) == (["a", "b"], 3)
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("require", "argv", "says"),
    [("", (), "COGWORKER_REQUIRE is unset"), ("", ("nojobs",), "define no @job")],
)
def test_a_worker_that_knows_no_job_warns_naming_the_setting(
    home: Path, redis_server: RedisServer, r: redis.Redis, require: str, argv: tuple[str, ...], says: str
) -> None:
    env = user_env(redis_server.url, COGWORKER_REQUIRE=require, COGWORKER_LOG_FORMAT="json")
    worker = Running(home, env, *argv)
    try:
        warning = worker.event("no_jobs_registered")
        assert warning["level"] == "warning"
        note = str(warning["note"])
        assert says in note and "COGWORKER_REQUIRE" in note, note
        if not argv:
            assert "`cogworker run MODULE`" in note
        else:
            assert warning["require"] == "nojobs"
    finally:
        worker.stop()
    assert not [e for e in log_events(worker.log) if e.get("event") == "jobs_registered"]


def test_cogworker_swarm_runs_a_job_and_its_workers_log_their_jobs(
    home: Path, redis_server: RedisServer, r: redis.Redis, swarms: SwarmRunner
) -> None:
    env = user_env(redis_server.url)
    assert cogworker(home, env, "enqueue", "myapp.on_a", '["by-swarm"]').returncode == 0
    swarm = swarms.start(
        command=[str(BIN / "cogworker"), "swarm"],
        cwd=home,
        PYTHONPATH="",
        COGWORKER_REQUIRE="myapp",
        COGWORKER_QUEUES="a",
        COGWORKER_COUNT="1",
        TEST_REDIS_URL=redis_server.url,
    )
    wait_until(lambda: "by-swarm" in ran(r), timeout=60, message=f"the job to run:\n{swarm.tail()}")
    assert ran(r)["by-swarm"] != swarm.pid  # a child of the swarm ran it
    [registered] = swarm.events("jobs_registered")
    assert (registered["count"], registered["slot"]) == (2, 0)
    swarm.proc.send_signal(signal.SIGTERM)
    assert swarm.proc.wait(timeout=30) == 0, swarm.tail()


# What `cogworker run` must not have loaded by the time its first job runs (issue 38): the other verbs'
# code and the settings model (~0.1 s each on the way to the first job), which the full command line
# (cli/main.py) imports to build its parser. The settings are checked in a child (cli/run_fast.py).
HEAVY_AT_FIRST_JOB = (
    "pydantic",
    "pydantic_settings",
    "cogworker.cli.main",
    "cogworker.cli.common",
    "cogworker.ops",
)

LOADED_APP = """\
import os
import sys

import redis

from cogworker import job


@job(queue="default")
def loaded() -> None:
    heavy = [name for name in {heavy!r} if name in sys.modules]
    client = redis.Redis.from_url(os.environ["TEST_REDIS_URL"], decode_responses=True)
    client.rpush("test:loaded", " ".join(["pid", str(os.getpid()), *heavy]))
"""


@pytest.mark.parametrize("env_file", [None, "app.env"], ids=["run", "env-file"])
def test_cogworker_run_reaches_its_first_job_without_the_other_verbs_or_pydantic(
    home: Path, redis_server: RedisServer, r: redis.Redis, env_file: str | None
) -> None:
    (home / "loadedapp.py").write_text(LOADED_APP.format(heavy=HEAVY_AT_FIRST_JOB))
    (home / "app.env").write_text("COGWORKER_CONCURRENCY=2\n")
    env = user_env(redis_server.url, COGWORKER_LOG_FORMAT="json")
    assert cogworker(home, env, "enqueue", "loadedapp.loaded", "[]").returncode == 0
    worker = Running(home, env, "loadedapp", env_file=env_file)
    try:
        line = wait_until(
            lambda: r.lindex("test:loaded", 0),
            timeout=30,
            message=f"the job to run:\n{worker.log.read_text()}",
        )
        assert line == f"pid {worker.proc.pid}"  # run by the worker itself, with none of them loaded
        # The env file is read before the settings are checked, in the child that checks them.
        assert worker.event("worker_ready")["concurrency"] == (2 if env_file else 10)
    finally:
        worker.stop()
