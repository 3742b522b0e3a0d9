"""`cogworker settings [--json]`: every setting in force, its default and where its value came from.

It reads only the settings (checked as every command checks them: a bad value exits 78 with the
variable named), never Redis, so it answers while Redis is down or misnamed, which is when it is
most wanted.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cogworker.cli.common import Context, table
from cogworker.env_file import read_env_file
from cogworker.settings_sources import ENV_FILE, Origin, layers_of, origins


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "settings",
        parents=parents,
        help="print every setting's value, default and source",
        description="Print every setting this command line would use: its COGWORKER_* variable, its "
        "value, where the value came from (an env file given with --env-file, the environment, or the "
        "default) and its default. Secrets show as stars and a Redis URL without its password. "
        "Needs no Redis.",
        epilog="example: cogworker --env-file /etc/cogworker/app.env settings --json",
    )
    parser.set_defaults(handler=print_settings)


def print_settings(ctx: Context) -> int:
    env_file: str | None = ctx.args.env_file
    # Read again only to know which variables it set: main() has loaded it already, so it is readable.
    from_file = read_env_file(env_file) if env_file is not None else None
    found = origins(ctx.settings, layers_of(os.environ, from_file))
    data = {"env_file": env_file, "settings": {o.name: _entry(o) for o in found}}

    def lines(_: Any) -> list[str]:
        rows = [
            (o.variable, _text(o.value), _source_text(o.source, env_file), _text(o.default)) for o in found
        ]
        return table(("VARIABLE", "VALUE", "SOURCE", "DEFAULT"), rows)

    ctx.emit(data, lines)
    return 0


def _entry(origin: Origin) -> dict[str, Any]:
    return {
        "variable": origin.variable,
        "value": origin.value,
        "default": origin.default,
        "source": origin.source,
    }


def _source_text(source: str, env_file: str | None) -> str:
    return f"{ENV_FILE} {env_file}" if source == ENV_FILE else source


def _text(value: Any) -> str:
    """A value as it would be written in an env file: true/false, unset, the rest as is."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)
