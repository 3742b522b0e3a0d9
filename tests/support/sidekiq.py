"""Debian's Sidekiq 6 beside cogworker on one Redis (tests/apps/sidekiq_bridge.rb; `make test` installs
it, deploy/ensure-sidekiq.sh): a `sidekiq` process in its own session, and Ruby snippets run with the
app loaded, for what Sidekiq's own API reads."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.support.paths import APP_DIR

RUBY_APP = APP_DIR / "sidekiq_bridge.rb"


def _needs(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        raise RuntimeError(
            f"no `{binary}` on PATH: run `make test` (deploy/ensure-sidekiq.sh installs Sidekiq)"
        )
    return found


def ruby(
    script: str, redis_url: str, stdin: str = "", app: Path = RUBY_APP, env: Mapping[str, str] | None = None
) -> str:
    """Run `script` with the app (and Sidekiq's API) loaded; its standard output."""
    done = subprocess.run(
        [_needs("ruby"), "-r", str(app), "-e", script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, REDIS_URL=redis_url, **(env or {})),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


class SidekiqProcess:
    """One `sidekiq` with `app` loaded, reading `queues` (default: `default`) with `threads` threads; its
    log in `log_path`. `env` is added to its environment (the app reads REDIS_URL from it)."""

    def __init__(
        self,
        redis_url: str,
        log_path: Path,
        app: Path = RUBY_APP,
        queues: tuple[str, ...] = ("default",),
        threads: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        command = [_needs("sidekiq"), "-r", str(app), "-c", str(threads), "-t", "1"]
        for name in queues:
            command += ["-q", name]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                env=dict(os.environ, REDIS_URL=redis_url, **(env or {})),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """TERM, as Sidekiq is stopped (it waits -t 1 s for a running job); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def __enter__(self) -> SidekiqProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.stop(timeout=15)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
