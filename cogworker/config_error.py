"""ConfigError on its own, so the code that reads settings files before the settings exist (the env
file of `cogworker --env-file PATH swarm`, which the swarm reads without pydantic) can raise and catch
it without importing the settings module. `cogworker.settings` exports it as its own."""

from __future__ import annotations


class ConfigError(Exception):
    """A setting that cannot be used: raised by `cogworker.load_settings()`.

    The message is one line naming each bad variable, its value (a Redis URL's password hidden) and
    what it accepts. Fix the variable (or override); a command exits 78 (CONFIG_ERROR) with it.
    """
