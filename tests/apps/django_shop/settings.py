"""Settings of the test project: the PostgreSQL database the test created, named by COGTEST_DB_NAME so
the test's own process and the workers it starts share it; settings.COGWORKER from COGTEST_* variables."""

from __future__ import annotations

import importlib.util
import json
import os

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["cogworker.contrib.django", "django_shop", "django_shop.billing"]
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the django-tasks package
    INSTALLED_APPS.insert(0, "django_tasks")
if os.environ.get("COGTEST_BROKEN_APP") == "1":
    INSTALLED_APPS.append("django_shop.broken")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("COGTEST_DB_NAME", "cogtest"),
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }
}

# cogworker's settings from Django's (cogworker/contrib/django/conf.py); the environment wins.
COGWORKER: dict[str, object] = {}
if "COGTEST_REDIS_URL" in os.environ:
    COGWORKER["REDIS_URL"] = os.environ["COGTEST_REDIS_URL"]
if "COGTEST_KEY_PREFIX" in os.environ:
    COGWORKER["KEY_PREFIX"] = os.environ["COGTEST_KEY_PREFIX"]
COGWORKER["TRANSACTION_AWARE"] = os.environ.get("COGTEST_TRANSACTION_AWARE") == "1"
# Any other keys, as a JSON object (the management command's tests configure a whole worker here).
COGWORKER.update(json.loads(os.environ.get("COGTEST_COGWORKER", "{}")))

TASKS = {
    "default": {
        "BACKEND": "cogworker.contrib.django.tasks.CogworkerBackend",
        "QUEUES": ["default", "django"],
        "OPTIONS": {"RETRY": 2},
    }
}
