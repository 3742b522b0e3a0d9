"""The Django integration (cogworker/contrib/django/) with a real Django project (tests/apps/django_shop)
on the machine's PostgreSQL (django_db.py) and real `cogworker run` workers set up with Django: pushes
after commit and none on rollback, transaction-aware pushes, Django `@task` functions run by a worker
through the django-tasks backport (this venv's Python 3.11; Django 6's own framework is tested in
test_django_native.py), fresh database connections per job, settings from settings.COGWORKER (the
environment winning), and a plain `cogworker run` worker that refuses to boot when the two disagree.
The management command is tested in test_django_manage.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from cogworker import exitcodes
from cogworker.api import client
from cogworker.settings import Settings
from tests.e2e.integrations import django_db
from tests.support.daemon_env import clean_env
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

QUEUE = "cogworker:queue:django"
django_env = django_db.django_env  # the session's database, shared with the other Django test modules


def start_worker(workers: WorkerPool, env: dict[str, str], **more: str) -> Any:
    return workers.start(
        COGWORKER_REQUIRE="cogworker.contrib.django.worker,django_shop.jobs",
        COGWORKER_QUEUES="django",
        COGWORKER_CONCURRENCY="1",
        **env,
        **more,
    )


def shipped(order_id: int) -> bool:
    from django_shop.models import Order

    return bool(Order.objects.filter(id=order_id, shipped=True).exists())


def test_pushes_wait_for_the_commit_and_vanish_on_rollback(
    django_env: dict[str, str], r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    from django.db import transaction
    from django_shop import jobs
    from django_shop.models import Order

    from cogworker.contrib.django import on_commit, perform_on_commit

    with transaction.atomic():
        kept = Order.objects.create(note="kept")
        jid = perform_on_commit(jobs.ship, kept.id)
        later = on_commit(jobs.ship.set(retry=1)).perform_in(60, kept.id)
        on_commit(jobs.ship).set(retry=2).perform_in(60, kept.id)  # .set() keeps waiting for the commit
        assert len(jid) == 24 and later is not None
        assert r.llen(QUEUE) == 0 and r.zcard("cogworker:schedule") == 0  # not before the commit
    assert [client_job["jid"] for client_job in map(_loads, r.lrange(QUEUE, 0, -1))] == [jid]
    assert r.zcard("cogworker:schedule") == 2

    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = Order.objects.create(note="dropped")
        dropped_id = dropped.id
        perform_on_commit(jobs.ship, dropped_id)
        raise RuntimeError("roll back")
    assert r.llen(QUEUE) == 1  # nothing pushed for the rolled-back transaction

    outside = Order.objects.create(note="autocommit")
    perform_on_commit(jobs.ship, outside.id)  # no transaction open: pushed at once
    assert r.llen(QUEUE) == 2

    start_worker(workers, django_env)
    wait_until(lambda: shipped(kept.id) and shipped(outside.id), timeout=30, message="both orders shipped")
    assert not Order.objects.filter(id=dropped_id).exists()
    assert all(b"dropped" not in raw.encode() for raw in r.lrange(QUEUE, 0, -1))


def _loads(raw: str) -> dict[str, Any]:
    return dict(json.loads(raw))


def test_transaction_aware_defers_every_push_inside_an_atomic_block(
    django_env: dict[str, str], r: redis.Redis, configured: Settings
) -> None:
    from django.db import transaction
    from django_shop import jobs

    from cogworker.contrib.django.transaction import use_transaction_aware

    use_transaction_aware(True)
    try:
        with transaction.atomic():
            jid = jobs.ship.perform_async(1)
            assert r.llen(QUEUE) == 0
        assert _loads(r.lindex(QUEUE, 0) or "{}")["jid"] == jid
        with pytest.raises(RuntimeError), transaction.atomic():
            jobs.ship.perform_async(2)
            raise RuntimeError("roll back")
        jobs.ship.perform_async(3)  # outside a transaction: now
        assert r.llen(QUEUE) == 2
    finally:
        use_transaction_aware(False)


def test_django_tasks_and_fresh_connections_per_job(
    django_env: dict[str, str], r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    from django_shop import jobs
    from django_shop.models import Order

    by_task = Order.objects.create(note="")
    result = jobs.ship_task.enqueue(by_task.id, note="task ran")
    assert len(result.id) == 24 and result.status == "READY"
    with pytest.raises(TypeError, match=r"args\[0\]: set is not JSON-native"):
        jobs.ship_task.enqueue({1})
    first, second = Order.objects.create(note="1"), Order.objects.create(note="2")
    jobs.ship.perform_async(first.id)
    jobs.ship.perform_async(second.id)

    start_worker(workers, django_env)
    wait_until(
        lambda: Order.objects.filter(id=by_task.id, note="task ran", shipped=True).exists(),
        timeout=30,
        message="the @task ran on the worker",
    )
    wait_until(lambda: shipped(first.id) and shipped(second.id), timeout=30, message="both jobs ran")
    sessions = set(
        Order.objects.filter(id__in=[first.id, second.id]).values_list("shipped_by_session", flat=True)
    )
    # One job thread ran both; the connection closed after the first, so the second opened another.
    assert len(sessions) == 2


def test_settings_come_from_django_and_the_environment_wins(
    django_env: dict[str, str], r: redis.Redis, redis_server: Any, workers: WorkerPool
) -> None:
    code = (
        "import django; django.setup()\n"
        "from cogworker.contrib.django import perform_on_commit\n"
        "from django_shop import jobs\n"
        "print(perform_on_commit(jobs.ship, 7))\n"
    )
    env = clean_env(django_env, COGTEST_REDIS_URL=redis_server.url, COGTEST_KEY_PREFIX="fromdjango:")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _loads(r.lindex("fromdjango:queue:django", 0) or "{}")["jid"] == done.stdout.strip()

    env["COGWORKER_KEY_PREFIX"] = "fromenv:"  # the environment wins over settings.COGWORKER
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert r.llen("fromenv:queue:django") == 1

    # "TRANSACTION_AWARE": True in settings.COGWORKER: a plain perform_async waits for the commit.
    aware = (
        "import django; django.setup()\n"
        "from django.db import transaction\n"
        "from django_shop import jobs\n"
        "try:\n"
        "    with transaction.atomic():\n"
        "        jobs.ship.perform_async(1)\n"
        "        raise KeyError\n"
        "except KeyError:\n"
        "    pass\n"
        "with transaction.atomic():\n"
        "    print(jobs.ship.perform_async(2))\n"
    )
    env.update(COGWORKER_KEY_PREFIX="aware:", COGTEST_TRANSACTION_AWARE="1")
    done = subprocess.run([sys.executable, "-c", aware], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [_loads(raw)["jid"] for raw in r.lrange("aware:queue:django", 0, -1)] == [done.stdout.strip()]

    # A worker reads only its environment: one that would serve another prefix refuses to boot.
    worker = start_worker(workers, django_env, COGTEST_KEY_PREFIX="fromdjango:")
    assert worker.proc.wait(timeout=60) == exitcodes.BOOT_ERROR
    assert "settings.COGWORKER sets COGWORKER_KEY_PREFIX" in worker.log_text()
    assert client.settings  # the test process's own client is untouched


def test_bad_settings_tasks_and_failed_pushes_say_what_is_wrong(
    django_env: dict[str, str], r: redis.Redis, settings: Settings
) -> None:
    import datetime as dt

    from django.core.exceptions import ImproperlyConfigured
    from django.db import transaction
    from django.test import override_settings
    from django_shop import jobs
    from django_tasks import task
    from django_tasks.exceptions import InvalidTaskError

    from cogworker.api.registry import JobNotFound
    from cogworker.contrib.django import conf, perform_on_commit
    from cogworker.contrib.django.tasks import run_task
    from cogworker.settings import load_settings

    for value, error in [
        ("redis://x", "must be a dict"),
        ({"NOPE": 1}, r"\['NOPE'\] is not a cogworker setting"),
        ({"CONCURRENCY": "many"}, "CONCURRENCY"),
        ({1: 2}, "not a setting name"),
    ]:
        with override_settings(COGWORKER=value), pytest.raises(ImproperlyConfigured, match=error):
            conf.load_settings()
    with override_settings(COGWORKER={"TRANSACTION_AWARE": "yes"}), pytest.raises(ImproperlyConfigured):
        conf.transaction_aware()

    # A scheduled task, and a task the backend can't run.
    client.configure(settings)
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    result = jobs.ship_task.using(run_after=at).enqueue(1)
    assert r.zscore("cogworker:schedule", r.zrange("cogworker:schedule", 0, 0)[0]) == pytest.approx(
        at.timestamp()
    )
    assert result.id in r.zrange("cogworker:schedule", 0, 0)[0]

    def with_context(context: object) -> None:
        pass

    with_context.__module__ = "django_shop.jobs"
    with_context.__qualname__ = "with_context"
    with pytest.raises(InvalidTaskError, match="takes_context"):
        task(takes_context=True)(with_context)

    # A worker runs only tasks under COGWORKER_REQUIRE, and only @task functions.
    client.configure(load_settings(redis_url=settings.redis_url, require="django_shop"))
    with pytest.raises(JobNotFound, match="in no installed app and not under COGWORKER_REQUIRE"):
        run_task.func("os.path.join", [], {})
    with pytest.raises(JobNotFound, match="not a @task function"):
        run_task.func("django_shop.models.Order", [], {})
    with pytest.raises(JobNotFound, match="can't import"):
        run_task.func("django_shop.missing.thing", [], {})

    # A push that fails at the commit is logged with its payload and raised to the committer.
    client.configure(load_settings(redis_url="redis://127.0.0.1:1/0"))
    with capture_logs() as events, pytest.raises(redis.ConnectionError), transaction.atomic():
        jid = perform_on_commit(jobs.ship, 99)
    [failed] = [e for e in events if e["event"] == "push_on_commit_failed"]
    assert failed["jid"] == jid and json.loads(failed["payload"])["args"] == [99]
