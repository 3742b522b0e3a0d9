"""The Web UI served for real in browser tests: `cogworker web` as a subprocess, or any ASGI app
(a host app mounting the UI) under uvicorn, each on a free port.

A server is ready when it answers HTTP 200 (polled, never slept for); at the end it gets SIGTERM,
then SIGKILL if it hasn't gone within a deadline. When the test body fails, the tail of the server's
stderr is printed, so the failure report carries the server's side of the story.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.redis_server import free_port, wait_until

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


class WebServer:
    """One HTTP server process on 127.0.0.1:<port>, its stderr in a file."""

    def __init__(self, command: list[str], port: int, env: dict[str, str], ready_path: str = "/") -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = Path(tempfile.mkstemp(prefix="cogworker-web-", suffix=".log")[1])
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_until(
                lambda: self._answers(ready_path),
                timeout=START_TIMEOUT_S,
                interval=0.05,
                message=f"{' '.join(command)} to answer 200 on {self.url}{ready_path}",
            )
        except TimeoutError as exc:
            self.stop()
            raise AssertionError(f"{exc}\n--- server output ---\n{self.tail()}") from None

    def _answers(self, path: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def tail(self, lines: int = 80) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)

    def close(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def _env(redis_url: str, env: dict[str, str]) -> dict[str, str]:
    full = dict(os.environ, COGWORKER_REDIS_URL=redis_url, COGWORKER_LOG_FORMAT="json")
    full.update(env)
    return full


@contextlib.contextmanager
def serving(command: list[str], port: int, env: dict[str, str], ready_path: str = "/") -> Iterator[WebServer]:
    server = WebServer(command, port, env, ready_path)
    try:
        yield server
    except BaseException:
        print(f"--- {' '.join(command)} (port {port}), last lines ---\n{server.tail()}")
        raise
    finally:
        server.close()


@contextlib.contextmanager
def cogworker_web(redis_url: str, **env: str) -> Iterator[WebServer]:
    """`cogworker web --port <free port>` against `redis_url`; yields the server (`.url` is its base)."""
    port = free_port()
    command = [sys.executable, "-m", "cogworker", "web", "--port", str(port)]
    with serving(command, port, _env(redis_url, env)) as server:
        yield server


@contextlib.contextmanager
def asgi_app(factory: str, redis_url: str, ready_path: str = "/", **env: str) -> Iterator[WebServer]:
    """uvicorn serving `module:function` (an app factory; the module reads COGWORKER_REDIS_URL)."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "uvicorn", factory, "--factory"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"),
    ]
    with serving(command, port, _env(redis_url, env), ready_path) as server:
        yield server
