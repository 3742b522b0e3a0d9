"""The environment of what a test runs with cogworker's settings: a child process (the CLI, a worker, a
swarm, a fresh interpreter) or this process itself (the in-process client, CLI and Web UI). Only the
test's values count: a COGWORKER_* variable left in the shell, or by another test, is dropped first,
so it can never change what the test checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping

import pytest

PREFIX = "COGWORKER_"


def clean_env(values: Mapping[str, str] | None = None, **more: str) -> dict[str, str]:
    """This process's environment without any COGWORKER_* variable, then `values` and `more`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(PREFIX)}
    env.update(values or {})
    env.update(more)
    return env


def use_only(monkeypatch: pytest.MonkeyPatch, values: Mapping[str, str]) -> dict[str, str]:
    """Sets this process's COGWORKER_* variables to `values` alone, until the test ends."""
    for name in list(os.environ):
        if name.startswith(PREFIX):
            monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return dict(values)


def run_cogworker(
    env: Mapping[str, str], *argv: str, code: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """`cogworker ARGV` (or `python -c CODE`, dedented) in a fresh interpreter configured only by `env`;
    a hang past `timeout` is a failure."""
    command = ["-c", textwrap.dedent(code)] if code is not None else ["-m", "cogworker", *argv]
    return subprocess.run(
        [sys.executable, *command], env=clean_env(env), capture_output=True, text=True, timeout=timeout
    )


# Short recovery thresholds through settings instead of long sleeps, for the tests that kill a worker:
# its presence lapses a second after its last beat, and another worker recovers its jobs as orphans
# within about two seconds.
QUICK_RECOVERY = {
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.2",
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "0.3",
}
