"""`python manage.py cogworker ...` in the test project (tests/apps/django_shop) configured by
settings.COGWORKER alone (no COGWORKER_* variable): `run` and `swarm` run a job from an installed
app's jobs module that nothing names (autodiscovery), the swarm stops on TERM, `status --json` reads
the same Redis, the environment wins over settings.COGWORKER, and a jobs module that fails to import
stops the command with its name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker import exitcodes
from cogworker.api import client
from cogworker.settings import Settings
from tests.e2e.integrations import django_db
from tests.support.daemon_env import clean_env, use_only
from tests.support.paths import APP_DIR
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import log_events

MANAGE = APP_DIR / "django_shop" / "manage.py"
django_env = django_db.django_env  # the session's database, shared with the other Django test modules
# A whole worker's settings, in settings.COGWORKER: numbers as numbers, as a settings.py has them.
WORKER = {
    "QUEUES": "django",
    "CONCURRENCY": 1,
    "COUNT": 1,
    "LOG_FORMAT": "json",
    "HEARTBEAT_INTERVAL_S": 0.3,
    "TIMEOUT_S": 5,
    "GRACEFUL_STOP_TIMEOUT_S": 10.0,
}


def project_env(django_env: dict[str, str], **cogworker: Any) -> dict[str, str]:
    """The environment of a manage.py command: the database, settings.COGWORKER, no COGWORKER_*."""
    return clean_env(django_env, COGTEST_COGWORKER=json.dumps(cogworker))


def manage(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE), "cogworker", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def started(env: dict[str, str], log: Path, *argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """`manage.py cogworker ARGV` in its own session; its whole session killed at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "cogworker", *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # The swarm's workers are in its session too: none may outlive the test.
        wait_until(lambda: not session_members(proc.pid), timeout=10, message="the session to be empty")


def session_members(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == sid:
                    found.append(int(entry))
    return found


def invoiced(order_id: int, note: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    from django_shop.models import Order

    if proc.poll() is not None:
        pytest.fail(f"{proc.args} exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
    return bool(Order.objects.filter(id=order_id, note=note, shipped=True).exists())


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{proc.args} did not stop on TERM:\n{log.read_text(errors='replace')[-3000:]}")
    assert code == exitcodes.OK, log.read_text(errors="replace")[-3000:]


def test_run_and_swarm_take_settings_cogworker_and_find_the_jobs_themselves(
    django_env: dict[str, str],
    r: redis.Redis,
    redis_server: RedisServer,
    configured: Settings,
    tmp_path: Path,
) -> None:
    from django_shop.billing import jobs
    from django_shop.models import Order

    env = project_env(django_env, REDIS_URL=redis_server.url, **WORKER)
    by_run, by_swarm = Order.objects.create(note=""), Order.objects.create(note="")
    jobs.invoice.perform_async(by_run.id, "by run")

    log = tmp_path / "run.log"
    with started(env, log, "run") as worker:
        wait_until(lambda: invoiced(by_run.id, "by run", worker, log), timeout=60, message="run ran the job")
        stop(worker, log)
    assert [e for e in log_events(log) if e.get("event") == "worker_ready"], log.read_text()[-3000:]

    jobs.invoice.perform_async(by_swarm.id, "by swarm")
    log = tmp_path / "swarm.log"
    with started(env, log, "swarm") as swarm:
        wait_until(
            lambda: invoiced(by_swarm.id, "by swarm", swarm, log), timeout=60, message="a child ran the job"
        )
        children = [pid for pid in session_members(swarm.pid) if pid != swarm.pid]
        assert children, "the supervisor runs the jobs in its children"
        stop(swarm, log)  # the supervisor is the process manage.py started (exec'd): TERM reaches it
        wait_until(lambda: not session_members(swarm.pid), timeout=20, message="every worker gone")
    assert any(e.get("role") == "swarm" for e in log_events(log)), log.read_text()[-3000:]


def test_status_json_reads_settings_cogworker_and_the_environment_wins(
    django_env: dict[str, str], r: redis.Redis, redis_server: RedisServer, configured: Settings
) -> None:
    from django_shop.billing import jobs

    jobs.invoice.perform_async(1, "queued")
    # Django's own options are manage.py's, wherever they stand: the verb never sees them.
    done = manage(
        project_env(django_env, REDIS_URL=redis_server.url),
        "--settings",
        "django_shop.settings",
        "status",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    queues = {q["name"]: q for q in json.loads(done.stdout)["queues"]}
    assert queues["django"]["size"] == 1

    # settings.COGWORKER names a Redis nobody listens on; the environment's URL wins.
    dead = project_env(django_env, REDIS_URL="redis://127.0.0.1:1/0")
    done = manage(dead, "status", "--json")
    assert done.returncode == exitcodes.FAILURE and "can't reach Redis" in done.stderr
    done = manage(dict(dead, COGWORKER_REDIS_URL=redis_server.url), "status", "--json")
    assert done.returncode == 0, done.stderr
    assert {q["name"] for q in json.loads(done.stdout)["queues"]} >= {"django"}

    # Every verb passes through, with its own options and exit codes.
    done = manage(dict(dead, COGWORKER_REDIS_URL=redis_server.url), "dead", "list", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) is not None, done.stderr
    done = manage(project_env(django_env), "no-such-verb")
    assert done.returncode == exitcodes.USAGE and "invalid choice" in done.stderr
    bad = manage(project_env(django_env, NOPE=1), "status")
    assert bad.returncode != 0 and "settings.COGWORKER['NOPE'] is not a cogworker setting" in bad.stderr
    assert client.settings  # this process's client is untouched


def test_autodiscovery_imports_each_apps_jobs_and_reports_a_broken_one(
    django_env: dict[str, str], redis_server: RedisServer, workers: Any
) -> None:
    probe = (
        "import sys, django; django.setup()\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_shop') and m.endswith('jobs')))\n"
    )

    def imported(env: dict[str, str]) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout.replace("'", '"')))

    assert imported(project_env(django_env)) == ["django_shop.billing.jobs", "django_shop.jobs"]
    assert imported(project_env(django_env, AUTODISCOVER=False)) == []

    # A jobs module that exists but fails to import stops Django's start-up, naming it.
    broken = dict(project_env(django_env, REDIS_URL=redis_server.url), COGTEST_BROKEN_APP="1")
    done = manage(broken, "run")
    assert done.returncode != 0
    assert "django_shop.broken.jobs (the jobs of the installed app 'broken') failed to import" in done.stderr
    assert "No module named 'django_shop.no_such_module'" in done.stderr
    # A worker started by plain `cogworker run` exits with its boot error, saying the same.
    worker = workers.start(COGWORKER_REQUIRE="cogworker.contrib.django.worker", **broken)
    assert worker.proc.wait(timeout=60) == exitcodes.BOOT_ERROR
    assert "django_shop.broken.jobs" in worker.log_text()


def test_call_command_runs_a_verb_and_fails_with_its_exit_code(
    django_env: dict[str, str],
    r: redis.Redis,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from django.core.management import CommandError, call_command
    from django.test import override_settings

    use_only(monkeypatch, {})
    saved = dict(os.environ)  # the command exports COGWORKER_* into this process's environment
    try:
        with override_settings(COGWORKER={"REDIS_URL": redis_server.url, "KEY_PREFIX": "called:"}):
            r.lpush("called:queue:mail", "{}")
            r.sadd("called:queues", "mail")  # as a push records its queue
            call_command("cogworker", "status", "--json")
            assert {q["name"]: q["size"] for q in json.loads(capsys.readouterr().out)["queues"]} == {
                "mail": 1
            }
            assert os.environ["COGWORKER_KEY_PREFIX"] == "called:"
            assert os.environ["COGWORKER_REQUIRE"] == "cogworker.contrib.django.worker"
        os.environ.clear()
        os.environ.update(saved)
        with (
            override_settings(COGWORKER={"REDIS_URL": "redis://127.0.0.1:1/0"}),
            pytest.raises(CommandError, match="exited 1") as failed,
        ):
            call_command("cogworker", "status")
        assert failed.value.returncode == exitcodes.FAILURE
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_every_kind_of_value_reaches_a_worker_as_settings_cogworker_gives_it(
    django_env: dict[str, str],
) -> None:
    export = (
        "import json, django; django.setup()\n"
        "from cogworker.contrib.django import conf\n"
        "from cogworker.settings import load_settings\n"
        "from cogworker.settings_fields import values_of\n"
        "written = conf.export_environment()\n"
        "print(json.dumps({'written': written, 'read': values_of(load_settings(), reveal=True)}))\n"
    )
    given = {
        "REDIS_URL": "redis://cache.internal:6380/2",
        "WEB_USERNAME": "ops",
        "web_password": "s3cret",  # keys are case-insensitive
        "PHASED_RESTART": False,
        "TIMEOUT_S": 7,
        "CONCURRENCY": 3,
        "MAXMEM_MB": None,
        "REQUIRE": "django_shop.jobs",
    }
    env = dict(project_env(django_env, **given), COGWORKER_CONCURRENCY="5")  # the environment wins
    done = subprocess.run([sys.executable, "-c", export], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["written"] == {
        "COGWORKER_REDIS_URL": "redis://cache.internal:6380/2",
        "COGWORKER_WEB_USERNAME": "ops",
        "COGWORKER_WEB_PASSWORD": "s3cret",
        "COGWORKER_PHASED_RESTART": "false",
        "COGWORKER_TIMEOUT_S": "7.0",
        "COGWORKER_REQUIRE": "cogworker.contrib.django.worker,django_shop.jobs",
    }
    read = out["read"]
    assert (read["web_password"], read["phased_restart"], read["timeout_s"]) == ("s3cret", False, 7.0)
    assert (read["concurrency"], read["maxmem_mb"], read["redis_url"]) == (5, None, given["REDIS_URL"])
