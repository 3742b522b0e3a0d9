"""Where each setting's value came from, for `cogworker settings`: the environment, an env file
(`--env-file`), or the default (settings_fields.py), with anything secret masked.

The settings object only holds values; their origin is found again from the same places it was read,
in the order the value was taken from them. pydantic-settings reads `COGWORKER_*` names whatever
their case, so they are matched here the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cogworker.redact import safe_url
from cogworker.secret import Secret
from cogworker.settings_fields import FIELD_NAMES, SettingsFields

PREFIX = "COGWORKER_"
ENVIRONMENT = "environment"
ENV_FILE = "env file"
DEFAULT = "default"


@dataclass(frozen=True)
class Origin:
    """One setting as `cogworker settings` shows it: its value and default masked where secret."""

    name: str
    variable: str
    value: Any
    default: Any
    source: str


def variable_of(name: str) -> str:
    """The environment variable a setting is read from: `redis_url` is COGWORKER_REDIS_URL."""
    return f"{PREFIX}{name.upper()}"


def shown(name: str, value: Any) -> Any:
    """A setting's value as it may be printed: a secret as stars (empty stays empty, so an unset one
    reads as unset), a Redis URL without its password; anything else as it is."""
    if isinstance(value, Secret):
        return str(value)
    if name == "redis_url" and isinstance(value, str):
        return safe_url(value)
    return value


def origins(settings: SettingsFields, layers: Sequence[tuple[str, Mapping[str, str]]]) -> list[Origin]:
    """Every setting of `settings`, in the fields' order, with the first of `layers` (a source's
    name and the variables it set, the one whose values won first) that sets its variable as its
    source, else DEFAULT."""
    by_upper = [(source, {variable.upper() for variable in variables}) for source, variables in layers]
    found = []
    for name in FIELD_NAMES:
        variable = variable_of(name)
        source = next((label for label, names in by_upper if variable in names), DEFAULT)
        found.append(
            Origin(
                name=name,
                variable=variable,
                value=shown(name, getattr(settings, name)),
                default=shown(name, getattr(SettingsFields, name)),
                source=source,
            )
        )
    return found


Layers = list[tuple[str, Mapping[str, str]]]


def layers_of(environ: Mapping[str, str], env_file: Mapping[str, str] | None) -> Layers:
    """The command line's sources, the winner first: an env file's values replace the environment's
    (cogworker/env_file.py), so a variable both set came from the file."""
    layers: Layers = []
    if env_file is not None:
        layers.append((ENV_FILE, env_file))
    layers.append((ENVIRONMENT, environ))
    return layers
