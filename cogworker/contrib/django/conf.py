"""cogworker's settings from Django's: `settings.COGWORKER`, a dict keyed by setting name without the
COGWORKER_ prefix (`{"REDIS_URL": "redis://cache:6379/2", "KEY_PREFIX": "shop"}`), case-insensitive.

The environment wins: a key whose COGWORKER_* variable is set is ignored, so one settings.py serves
every deployment and an instance's env file (deploy_kit/cogworker.env.example) can still override it, as
it does for a worker, which reads only the environment. A worker set up with Django
(worker.py) refuses to boot when the two disagree on a setting, rather than serve another Redis
than the web processes push to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from cogworker import settings as cw_settings

# Keys of settings.COGWORKER that configure this integration rather than cogworker itself.
INTEGRATION_KEYS = frozenset({"TRANSACTION_AWARE"})
ENV_PREFIX = "COGWORKER_"


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


def transaction_aware() -> bool:
    value = {key.upper(): item for key, item in _declared().items()}.get("TRANSACTION_AWARE", False)
    if not isinstance(value, bool):
        raise ImproperlyConfigured(
            f"settings.COGWORKER['TRANSACTION_AWARE'] must be True or False, not {value!r}"
        )
    return value


def disagreements(worker: cw_settings.Settings) -> list[str]:
    """The settings a worker's own (environment) settings give another value than settings.COGWORKER:
    named, never shown (a Redis URL holds a password)."""
    wanted = load_settings()
    return sorted(
        f"COGWORKER_{field.upper()}"
        for field in overrides()
        if getattr(wanted, field) != getattr(worker, field)
    )
