"""Flask (`pip install 'cogworker-redis[flask]'`; docs/integrations/flask.md): jobs run inside the
app's context, and the job API takes its settings from the app's config.

`init_app(app)`, called where the app is built (its factory, or the module that creates it):

- points the job API (pushes, results, statuses) at the settings `app.config` gives: any
  `COGWORKER_<SETTING>` key (`COGWORKER_REDIS_URL`, `COGWORKER_KEY_PREFIX`, ...). The environment
  wins: a key whose COGWORKER_* variable is set is ignored, as in the Django integration, so one
  config serves every deployment and an env file can still override it;
- adds a server middleware that runs each job inside `app.app_context()`, so a job may use
  `flask.current_app`, `flask.g` and extensions bound to the app (Flask-SQLAlchemy's session). A job
  run where that app's context is already current (inline testing mode, in a view or a test that
  pushed one) runs in it rather than a fresh one.

The last app given to `init_app` in a process is the one its jobs run in. A worker finds it by
importing the app's module (`COGWORKER_REQUIRE=myapp`), or for an app factory through
`cogworker.contrib.flask.worker` (worker.py), which loads `FLASK_APP` as `flask run` does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flask import Flask, current_app, has_app_context

from cogworker.api import client
from cogworker.api.middleware import ServerNext, server_chain
from cogworker.settings import ConfigError, Settings, load_settings

ENV_PREFIX = "COGWORKER_"
EXTENSION = "cogworker"

_app: Flask | None = None


def init_app(app: Flask) -> None:
    """Configure the job API from `app.config` and run this process's jobs in the app's context.

    Args:
        app: The Flask app.

    Raises:
        ConfigError: A COGWORKER_* key of `app.config` is not a setting, or a value is invalid
            (the message names it).
    """
    global _app
    settings = settings_for(app)
    client.configure(settings)
    app.extensions[EXTENSION] = settings
    _app = app
    server_chain.add(run_in_app_context)


def app() -> Flask | None:
    """The app this process's jobs run in: the last one given to `init_app`, or None."""
    return _app


def overrides(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings `config` gives (its COGWORKER_* keys) that the environment doesn't, by field name.

    Args:
        config: The app's config (or any mapping).
        environ: The environment. Default: `os.environ`.

    Returns:
        Field name -> value, for `cogworker.load_settings(**found)`.

    Raises:
        ConfigError: A COGWORKER_* key names no setting.
    """
    env = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for key, value in config.items():
        if not (isinstance(key, str) and key.startswith(ENV_PREFIX)):
            continue
        field = key.removeprefix(ENV_PREFIX).lower()
        if field not in Settings.model_fields:
            raise ConfigError(f"app.config[{key!r}] is not a cogworker setting")
        if key not in env:
            found[field] = value
    return found


def settings_for(app: Flask) -> Settings:
    """cogworker's settings for `app`: the environment, then `app.config` for what it leaves unset.

    Raises:
        ConfigError: A key is not a setting, or a value is invalid.
    """
    try:
        return load_settings(**overrides(app.config))
    except ConfigError as exc:
        raise ConfigError(f"app.config (or COGWORKER_*): {exc}") from None


def disagreements(app: Flask, worker: Settings) -> list[str]:
    """The settings a worker's own (environment) settings give another value than `app.config`:
    named, never shown (a Redis URL holds a password)."""
    wanted = settings_for(app)
    return sorted(
        f"{ENV_PREFIX}{field.upper()}"
        for field in overrides(app.config)
        if getattr(wanted, field) != getattr(worker, field)
    )


def _inside(app: Flask) -> bool:
    # current_app is a proxy: compare the object behind it, not the proxy.
    return has_app_context() and current_app._get_current_object() is app  # type: ignore[attr-defined]


def run_in_app_context(job: dict[str, Any], call_next: ServerNext) -> None:
    """Server middleware: the job inside the app's context, pushed for the job and popped after it
    (whatever the job did), on the thread that runs the job. An `async def` job's task runs in a copy
    of that thread's context, so it sees the app too.

    Args:
        job: The payload being run.
        call_next: The rest of the server chain, ending in the job.
    """
    app = _app
    if app is None or _inside(app):
        call_next()
        return
    with app.app_context():
        call_next()
