"""What someone who can write to Redis, or read the logs, must not get.

- A payload names a job; it must not make a worker import whatever module it names (the module's
  top-level code would run in the worker). Only registered jobs and modules under COGWORKER_REQUIRE
  (and their submodules) resolve; anything else is an unknown job, filed without an import.
- The Redis password never appears in an error message, a log line or a command's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import demo_jobs
import pytest
import redis

from cogworker import codec
from cogworker.api.registry import JobNotFound, resolve
from cogworker.redact import safe_url
from cogworker.settings import ConfigError, Settings, load_settings
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.daemon_env import clean_env
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

NOT_REGISTERED = "not a registered job; add its module to COGWORKER_REQUIRE"


def raw_job(name: str, jid: str) -> str:
    return codec.dumps(
        {"class": name, "args": [], "kwargs": {}, "jid": jid, "queue": "default", "retry": False}
    )


def test_a_payload_cannot_make_a_worker_import_a_module(
    r: redis.Redis, configured: object, workers: WorkerPool, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    for jid, name in (("side", "marker_on_import.x"), ("zen", "this.x"), ("runner", "unittest.__main__.x")):
        r.lpush("cogworker:queue:default", raw_job(name, jid))
    demo_jobs.record.perform_async("behind")
    worker = workers.start(MARKER_ON_IMPORT=str(marker))
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the job behind them")
    wait_until(lambda: r.zcard("cogworker:dead") == 3, timeout=10, message="three unknown jobs in dead")
    dead = {d["jid"]: d for d in map(json.loads, r.zrange("cogworker:dead", 0, -1))}
    assert set(dead) == {"side", "zen", "runner"}
    for entry in dead.values():
        assert entry["error_class"] == "cogworker.JobNotFound"
        assert NOT_REGISTERED in entry["error_message"]
    assert not marker.exists()
    assert "Zen of Python" not in worker.log_text()


def test_jobs_under_a_required_module_resolve_and_nothing_else_is_imported() -> None:
    assert resolve("required_pkg.lazy_jobs.hello", allowed=("required_pkg",)).func("x") == "hello x"
    # A registered job resolves whatever is allowed: the process imported it on purpose.
    assert resolve(demo_jobs.record.name, allowed=()) is demo_jobs.record
    for name, allowed in (
        ("marker_on_import.x", ("marker",)),  # a prefix of the name, not a parent module
        ("marker_on_import.x", ("required_pkg",)),
        ("marker_on_import.x", ()),
        ("required_pkg..x", ("required_pkg",)),
        ("x", ("x",)),
    ):
        with pytest.raises(JobNotFound, match=NOT_REGISTERED):
            resolve(name, allowed=allowed)
    assert "marker_on_import" not in sys.modules


def test_cli_enqueue_warns_that_workers_would_refuse_a_job_outside_require(
    cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REQUIRE", "demo_jobs")
    out = cli("enqueue", "billing_app.jobs.charge", "[1]")
    assert out.code == 0
    assert "'billing_app.jobs' is not under COGWORKER_REQUIRE here" in out.err
    assert cli("enqueue", "demo_jobs.record", '["x"]').err == ""


# Passwords that break URL parsing (`/`, `#`, `?` end the authority early), or pass it.
LEAKY_URLS = [
    ("redis://:pa/ss-hunter2@localhost:6379/0", "hunter2"),
    ("redis://user:hunter2#x@localhost:6379/0", "hunter2"),
    ("redis://user:hunt?er2@localhost:6379/0", "hunt"),
    ("redis://:hunter2@localhost:99999/0", "hunter2"),
    ("http://:hunter2@localhost:6379/0", "hunter2"),
    ("redis://:hunter2@", "hunter2"),
    ("redis://:hunter2@:6379/0", "hunter2"),
    ("redis://u:12/x-hunter2@localhost/0", "hunter2"),  # parses: host u, port 12, path /x-hunter2@...
    ("redis://u:12?hunter2@localhost/0", "hunter2"),
]


@pytest.mark.parametrize(("url", "secret"), LEAKY_URLS)
def test_a_bad_url_is_reported_without_its_password(url: str, secret: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(redis_url=url)
    assert "COGWORKER_REDIS_URL" in str(err.value)
    assert secret not in str(err.value)
    with pytest.raises(ValueError) as raw:
        Settings(redis_url=url)  # what a user constructing the settings sees
    assert secret not in str(raw.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@localhost:6379/0", "redis://:***@localhost:6379/0"),
        ("redis://user:hunter2@localhost/0", "redis://user:***@localhost/0"),
        ("redis://hunter2@localhost/0", "redis://***@localhost/0"),
        ("redis://:pa/ss-hunter2@localhost:6379/0", "redis://:***@localhost:6379/0"),
        ("redis://u:a@b@localhost/0", "redis://u:***@localhost/0"),
        ("rediss://localhost:6380/0?password=hunter2&db=1", "rediss://localhost:6380/0?password=***&db=1"),
        ("unix://:hunter2@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("hunter2@localhost", "***@localhost"),
    ],
)
def test_safe_url(url: str, shown: str) -> None:
    assert safe_url(url) == shown


def test_settings_repr_hides_the_password() -> None:
    settings = load_settings(redis_url="redis://:hunter2@localhost:6379/0")
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
    assert "redis://:***@localhost:6379/0" in repr(settings)


@pytest.mark.parametrize(
    "argv", [["-m", "cogworker", "status"], ["-m", "supervisor.main"]], ids=["status", "swarm"]
)
def test_commands_exit_78_on_a_bad_url_without_showing_its_password(argv: list[str]) -> None:
    env = clean_env(COGWORKER_REDIS_URL="redis://:pa/ss-hunter2@localhost:6379/0")
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    assert "COGWORKER_REDIS_URL" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def test_env_file_keeps_the_password_off_the_command_line(tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text("# instance\nCOGWORKER_REDIS_URL='redis://:pa/ss-hunter2@localhost:6379/0'\n")
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "--env-file", str(env_file), "status"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 78, done.stderr
    assert "COGWORKER_REDIS_URL" in done.stderr and "hunter2" not in done.stdout + done.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "cogworker", "--env-file", str(tmp_path / "nope.env"), "status"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 78
    assert "nope.env" in missing.stderr


def test_resolving_a_name_runs_no_attribute_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "getattr"
    monkeypatch.setenv("MARKER_ON_GETATTR", str(marker))
    with pytest.raises(JobNotFound, match="not a @job function"):
        resolve("required_pkg.anything", allowed=("required_pkg",))
    assert not marker.exists()
