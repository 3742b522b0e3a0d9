"""cogworker's settings from Django's: `settings.COGWORKER`, a dict keyed by setting name without the
COGWORKER_ prefix (`{"REDIS_URL": "redis://cache:6379/2", "KEY_PREFIX": "shop"}`), case-insensitive.

The environment wins: a key whose COGWORKER_* variable is set is ignored, so one settings.py serves
every deployment and an instance's env file (deploy_kit/cogworker.env.example) can still override it.
`manage.py cogworker ...` (management/commands/cogworker.py) exports what settings.COGWORKER gives and
the environment doesn't as COGWORKER_* variables (`export_environment`), so the `cogworker` command it
runs, and a swarm's workers, read the same settings as the web processes. A worker started by plain
`cogworker run` reads only its environment: set up with Django (worker.py), it refuses to boot when
settings.COGWORKER gives a value its environment lacks, rather than serve another Redis than the web
processes push to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from cogworker import settings as cw_settings
from cogworker.secret import Secret

# Keys of settings.COGWORKER that configure this integration rather than cogworker itself.
INTEGRATION_KEYS = frozenset({"TRANSACTION_AWARE", "AUTODISCOVER"})
ENV_PREFIX = "COGWORKER_"
# The worker module that sets Django up in a process the management command starts (a swarm's
# workers): first in the COGWORKER_REQUIRE it exports.
WORKER_MODULE = "cogworker.contrib.django.worker"


def _declared() -> Mapping[str, Any]:
    value = getattr(django_settings, "COGWORKER", {})
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f"settings.COGWORKER must be a dict, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise ImproperlyConfigured(f"settings.COGWORKER: key {key!r} is not a setting name")
    return value


def overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings settings.COGWORKER gives that the environment doesn't, by field name."""
    env = {name.upper() for name in (os.environ if environ is None else environ)}
    found: dict[str, Any] = {}
    for key, value in _declared().items():
        name = key.upper().removeprefix(ENV_PREFIX)
        if name in INTEGRATION_KEYS:
            continue
        field = name.lower()
        if field not in cw_settings.Settings.model_fields:
            raise ImproperlyConfigured(f"settings.COGWORKER[{key!r}] is not a cogworker setting")
        if ENV_PREFIX + name not in env:
            found[field] = value
    return found


def load_settings() -> cw_settings.Settings:
    """Read cogworker's Settings: the environment, then settings.COGWORKER for what it leaves unset.

    Returns:
        The checked Settings.

    Raises:
        ImproperlyConfigured: A key of settings.COGWORKER is not a setting, or a value is invalid.
    """
    given = overrides()
    try:
        return cw_settings.load_settings(**given)
    except cw_settings.ConfigError as exc:
        raise ImproperlyConfigured(f"settings.COGWORKER (or COGWORKER_*): {exc}") from None


def _flag(name: str, default: bool) -> bool:
    value = {key.upper(): item for key, item in _declared().items()}.get(name, default)
    if not isinstance(value, bool):
        raise ImproperlyConfigured(f"settings.COGWORKER[{name!r}] must be True or False, not {value!r}")
    return value


def transaction_aware() -> bool:
    """`"TRANSACTION_AWARE"`: every push inside an atomic block waits for its commit (default False)."""
    return _flag("TRANSACTION_AWARE", False)


def autodiscover() -> bool:
    """`"AUTODISCOVER"`: import each installed app's `jobs` module when Django starts (default True)."""
    return _flag("AUTODISCOVER", True)


def _env_text(value: Any) -> str:
    """A checked setting's value as its COGWORKER_* variable spells it: every setting is a string, a
    number, a bool or a secret, which pydantic reads back from these."""
    if isinstance(value, Secret):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def export_environment() -> dict[str, str]:
    """Write what settings.COGWORKER gives, and the environment doesn't, into os.environ as COGWORKER_*
    variables, for the `cogworker` command and the processes it starts (a swarm's workers).

    COGWORKER_REQUIRE gets this integration's worker module first (a process that starts from the
    environment alone sets Django up with it, which imports the apps' `jobs` modules) and
    DJANGO_SETTINGS_MODULE is set: both are what a worker needs to find the same project.

    Returns:
        The variables written, by name.

    Raises:
        ImproperlyConfigured: settings.COGWORKER is invalid.
    """
    wanted = load_settings()
    written: dict[str, str] = {}
    for field in overrides():
        value = getattr(wanted, field)
        if value is not None:  # None is the default of every setting that takes it: left unset
            written[ENV_PREFIX + field.upper()] = _env_text(value)
    required = [m for m in wanted.require_modules if m != WORKER_MODULE]
    written[ENV_PREFIX + "REQUIRE"] = ",".join([WORKER_MODULE, *required])
    os.environ.update(written)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", str(django_settings.SETTINGS_MODULE))
    return written


def disagreements(worker: cw_settings.Settings) -> list[str]:
    """The settings a worker's own (environment) settings give another value than settings.COGWORKER:
    named, never shown (a Redis URL holds a password)."""
    wanted = load_settings()
    return sorted(
        f"COGWORKER_{field.upper()}"
        for field in overrides()
        if getattr(wanted, field) != getattr(worker, field)
    )
