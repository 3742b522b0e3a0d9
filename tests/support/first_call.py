"""A public entry point as a new user's first call: `code` run in a fresh interpreter, configured only
by COGWORKER_* environment variables, in a subprocess with a timeout (a hang is a failure)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT_S = 20.0


def first_call(code: str, url: str, *, timeout: float = TIMEOUT_S, **env: str) -> str:
    """Run `code` (dedented) with COGWORKER_REDIS_URL=url (COGWORKER_REQUIRE=demo_jobs unless `env`
    says otherwise) and no other COGWORKER_* variable; returns its stdout, stripped."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    clean.update(COGWORKER_REDIS_URL=url, COGWORKER_REQUIRE="demo_jobs")
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
