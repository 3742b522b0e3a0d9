"""Settings of the test project: the database the test created (PostgreSQL, or SQLite where there is
none), named by COGTEST_DB_* variables so the test's own process and the workers it starts share it."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "cogworker.contrib.django", "django_shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("COGTEST_DB_ENGINE", "postgresql") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("COGTEST_DB_NAME", "cogtest"),
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "5432",
        }
    }
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["COGTEST_DB_NAME"]}}

# cogworker's settings from Django's (cogworker/contrib/django/conf.py); the environment wins.
COGWORKER: dict[str, object] = {}
if "COGTEST_REDIS_URL" in os.environ:
    COGWORKER["REDIS_URL"] = os.environ["COGTEST_REDIS_URL"]
if "COGTEST_KEY_PREFIX" in os.environ:
    COGWORKER["KEY_PREFIX"] = os.environ["COGTEST_KEY_PREFIX"]
COGWORKER["TRANSACTION_AWARE"] = os.environ.get("COGTEST_TRANSACTION_AWARE") == "1"

TASKS = {
    "default": {
        "BACKEND": "cogworker.contrib.django.tasks.CogworkerBackend",
        "QUEUES": ["default", "django"],
        "OPTIONS": {"RETRY": 2},
    }
}
