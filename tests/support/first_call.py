"""A public entry point as a new user's first call: `code` run in a fresh interpreter, configured only
by COGWORKER_* environment variables, in a subprocess with a timeout (a hang is a failure)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.daemon_env import clean_env

TIMEOUT_S = 20.0


def first_call(code: str, url: str, *, timeout: float = TIMEOUT_S, **env: str) -> str:
    """Run `code` (dedented) with COGWORKER_REDIS_URL=url (COGWORKER_REQUIRE=demo_jobs unless `env`
    says otherwise) and no other COGWORKER_* variable; returns its stdout, stripped."""
    clean = clean_env(COGWORKER_REDIS_URL=url, COGWORKER_REQUIRE="demo_jobs")
    clean.update(env)
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=clean,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the first call hung for {timeout}s: {exc.stderr!r}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
