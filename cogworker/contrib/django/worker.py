"""A worker set up with Django. `python manage.py cogworker run` (or `swarm`) puts this module first in
COGWORKER_REQUIRE itself; a worker started by plain `cogworker run` lists it there
(`COGWORKER_REQUIRE=cogworker.contrib.django.worker`), with DJANGO_SETTINGS_MODULE in its environment.

Importing it runs `django.setup()` (so the jobs' modules may import models, and the installed apps'
`jobs` modules are imported: discovery.py), refuses to boot when settings.COGWORKER gives a value the
worker's own COGWORKER_* environment lacks (conf.py; the management command exports them, so only a
worker started without it can differ), registers the
runner of Django `@task` functions when a tasks framework is installed (tasks.py), and adds a server
middleware that closes stale database connections before and after each job, as Django does around
each request (`close_old_connections`): a job thread otherwise keeps a connection the database has
since dropped, or holds one open forever.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import django
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections

from cogworker.api.middleware import server_chain
from cogworker.contrib.django import conf


def close_stale_connections(job: dict[str, Any], call_next: Callable[[], Any]) -> Any:
    close_old_connections()
    try:
        return call_next()
    finally:
        close_old_connections()


def _check_settings() -> None:
    from cogworker.settings import load_settings

    differ = conf.disagreements(load_settings())
    if differ:
        raise ImproperlyConfigured(
            f"settings.COGWORKER sets {', '.join(differ)} to another value than this worker's "
            "environment, which is all `cogworker run` reads: start it with `python manage.py "
            "cogworker run`, which reads settings.COGWORKER, or set the same in its environment"
        )


def _has_tasks_framework() -> bool:
    return (
        importlib.util.find_spec("django.tasks") is not None
        or importlib.util.find_spec("django_tasks") is not None
    )


if not apps.ready:
    django.setup()
_check_settings()
if _has_tasks_framework():
    importlib.import_module("cogworker.contrib.django.tasks")
server_chain.add(close_stale_connections)
