"""The Django tests' database: one PostgreSQL database per test session, made on the machine's server
(`make postgres` installs and starts one) and dropped after; the variables the test project
(tests/apps/django_shop/settings.py) reads to find it. Without PostgreSQL the tests fail, naming the
fix: a skipped Django test would pass CI with the integration untested."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg  # the dev group's: imported, not skipped, so a venv without it fails the Django tests
import pytest

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


def require_postgres() -> None:
    try:
        psycopg.connect(ADMIN, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.fail(
            f"PostgreSQL is not reachable as user postgres on 127.0.0.1:5432 ({exc}): "
            "`make postgres` installs and starts it (the Django tests need it)"
        )


def admin(sql: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def database(name: str) -> Iterator[None]:
    """A fresh database `name`, dropped afterwards (with any session a worker left open)."""
    require_postgres()
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def rows(name: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Read database `name` from the test process (no Django needed, for another venv's project)."""
    with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={name}", autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


# The environment of the session's database once made: each test module that uses `django_env` holds
# its own copy of the fixture, and Django reads its settings once per process, so the first one makes
# the database and the others reuse it.
_made: dict[str, str] = {}


@pytest.fixture(scope="session")
def django_env() -> Iterator[dict[str, str]]:
    """The test project's database, created and migrated, and this process set up with Django on it;
    the variables a worker (or manage.py) needs to share it. Session-wide: Django reads its settings
    once per process."""
    if _made:
        yield dict(_made)
        return
    import django

    env = {
        "COGTEST_DB_NAME": f"cogtest_django_{os.getpid()}",
        "DJANGO_SETTINGS_MODULE": "django_shop.settings",
    }
    with_db = database(env["COGTEST_DB_NAME"])
    next(with_db)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        django.setup()
        from django.core.management import call_command

        call_command("migrate", run_syncdb=True, verbosity=0)
        _made.update(env)
        yield env
    finally:
        _made.clear()
        from django.db import connections

        connections.close_all()
        with_db.close()  # runs the generator's finally: the DROP
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
