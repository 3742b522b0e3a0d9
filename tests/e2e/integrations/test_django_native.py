"""The `django.tasks` backend (cogworker/contrib/django/tasks.py) on Django's own tasks framework:
Django 6.1 under Python 3.12, the package's wheel installed (not editable) with its `django` extra in
a fresh virtualenv, the test project (tests/apps/django_shop) copied beside its manage.py, on the
machine's PostgreSQL. A `@task` enqueued by the project runs on `manage.py cogworker run`, configured
by settings.COGWORKER alone. (The django-tasks backport on this venv's Python 3.11 is tested in
test_django.py.)

The virtualenv is made once per session and installs through pip as a user's would: pip's cache keeps
a re-run to seconds."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker import exitcodes
from tests.e2e.integrations import django_db
from tests.support.paths import APP_DIR, ROOT
from tests.support.redis_server import RedisServer, wait_until

pytestmark = pytest.mark.slow

PYTHON = "3.12"
DJANGO = "django>=6.1,<6.2"
ENQUEUE = """\
import os
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_shop.settings")
django.setup()
from django_shop.jobs import ship_task
from django_shop.models import Order

order = Order.objects.create(note="")
result = ship_task.enqueue(order.id, note="by django.tasks")
print(order.id, result.id, result.status, type(ship_task).__module__, django.get_version())
"""


class Project:
    """The virtualenv and the project directory (`home`, holding manage.py and django_shop/)."""

    def __init__(self, root: Path, home: Path) -> None:
        self.python = root / "bin" / "python"
        self.home = home
        # No PYTHONPATH (conftest.py puts the checkout on it) and no settings of the test run's own.
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("COGWORKER_", "COVERAGE", "COGTEST_"))
            and k not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")
        }

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *argv],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    found = sorted(glob.glob(f"/root/.pyenv/versions/{PYTHON}.*/bin/python3"))
    if not found:
        pytest.fail(f"Python {PYTHON} is not under /root/.pyenv/versions: Django 6 can't be tested")
    base = tmp_path_factory.mktemp("django-native")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(base / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = (base / "dist").glob("*.whl")
    made = subprocess.run(
        [found[-1], "-m", "venv", str(base / "venv")], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    home = base / "home"
    shutil.copytree(
        APP_DIR / "django_shop", home / "django_shop", ignore=shutil.ignore_patterns("__pycache__")
    )
    (home / "django_shop" / "manage.py").rename(home / "manage.py")
    project = Project(base / "venv", home)
    # The driver is the app's to choose (the extra brings none): psycopg, as a user's project would.
    installed = project.run(
        "-m", "pip", "install", "-q", f"{wheel}[django]", DJANGO, "psycopg[binary]", timeout=400
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return project


@pytest.fixture
def database(project: Project) -> Iterator[str]:
    name = f"cogtest_django_native_{os.getpid()}"
    with_db = django_db.database(name)
    next(with_db)
    project.env.update(COGTEST_DB_NAME=name)
    try:
        migrated = project.run("manage.py", "migrate", "--run-syncdb", "-v", "0")
        assert migrated.returncode == 0, migrated.stderr
        yield name
    finally:
        with_db.close()


@pytest.mark.timeout(600)
def test_a_django_task_runs_on_django_6_through_the_cogworker_backend(
    project: Project, database: str, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    project.env["COGTEST_COGWORKER"] = json.dumps(
        {"REDIS_URL": redis_server.url, "QUEUES": "django", "CONCURRENCY": 1, "LOG_FORMAT": "json"}
    )
    enqueued = project.run("-c", ENQUEUE)
    assert enqueued.returncode == 0, enqueued.stderr
    order_id, jid, status, task_module, version = enqueued.stdout.split()
    # Django's own framework, not the backport: django-tasks is not even installed on 3.12.
    assert (task_module, version.split(".")[:2]) == ("django.tasks.base", ["6", "1"])
    assert status == "READY" and len(jid) == 24
    [payload] = [json.loads(raw) for raw in r.lrange("cogworker:queue:django", 0, -1)]
    assert payload["jid"] == jid and payload["args"][0] == "django_shop.jobs.ship_task"
    assert project.run("-c", "import django_tasks").returncode != 0

    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(project.python), "manage.py", "cogworker", "run"],
            cwd=project.home,
            env=project.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def shipped() -> bool:
            if worker.poll() is not None:
                pytest.fail(
                    f"the worker exited {worker.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
                )
            found = django_db.rows(
                database, "SELECT shipped, note FROM django_shop_order WHERE id = %s", int(order_id)
            )
            return found == [(True, "by django.tasks")]

        wait_until(shipped, timeout=60, message="the @task to run on the worker")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == exitcodes.OK, log.read_text(errors="replace")[-3000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
