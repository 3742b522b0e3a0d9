"""`cogworker --env-file PATH`: an instance's env file, read into the environment before the settings."""

from __future__ import annotations

import io
import os
from pathlib import Path

from cogworker.config_error import ConfigError


def load_env_file(path: str) -> None:
    """`cogworker --env-file PATH`: load an instance's env file (VAR=value lines, `#` comments,
    quoted values) into this process's environment, its values winning, as systemd's EnvironmentFile=
    gives them to the service. The file's contents (a Redis password) stay off the command line,
    where `ps` and sudo's log would show them."""
    os.environ.update(read_env_file(path))


def read_env_file(path: str) -> dict[str, str]:
    """The variables an env file sets (what load_env_file loads; `cogworker settings` names it as
    their source). Raises ConfigError, naming the file, when it can't be read."""
    from dotenv import dotenv_values

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"--env-file {path}: can't read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    # No $VAR expansion: systemd does none either, and a password may hold a `$`.
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {name: value for name, value in values.items() if value is not None}
