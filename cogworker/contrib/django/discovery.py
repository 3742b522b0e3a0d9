"""Autodiscovery of job modules: each installed app's `jobs` module is imported when Django starts
(Celery's `autodiscover_tasks`, django-rq's and django-dramatiq's `tasks` modules), in web processes
and workers alike, so a Django project needs no COGWORKER_REQUIRE: its jobs are registered before a
worker fetches, and a web process pushes the same names a worker knows.

An app without a `jobs` module is skipped. A `jobs` module that exists but fails to import stops
Django's start-up (a worker exits with its boot error) with the module named: swallowing it would
leave a worker that files every job of that module as JobNotFound. `"AUTODISCOVER": False` in
settings.COGWORKER turns it off; COGWORKER_REQUIRE then names the modules, as without Django.
"""

from __future__ import annotations

from importlib import import_module

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import module_has_submodule

MODULE = "jobs"


def autodiscover() -> list[str]:
    """Import `<app>.jobs` for each installed app that has one.

    Returns:
        The modules imported, in INSTALLED_APPS order.

    Raises:
        ImproperlyConfigured: A `jobs` module exists but raised while it was imported (chained).
    """
    found: list[str] = []
    for app in apps.get_app_configs():
        # Asked of the app's package without importing: a missing module is not an error, while an
        # ImportError raised inside one that exists is.
        if not module_has_submodule(app.module, MODULE):
            continue
        name = f"{app.name}.{MODULE}"
        try:
            import_module(name)
        except Exception as exc:
            raise ImproperlyConfigured(
                f"cogworker: {name} (the jobs of the installed app {app.label!r}) failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        found.append(name)
    return found
