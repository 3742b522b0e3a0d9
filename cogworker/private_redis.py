"""A throwaway redis-server for users' tests: the pytest plugin's `cogworker_redis_url` (pytest_plugin.py).

It runs the `redis-server` found on PATH on a free port of 127.0.0.1 (never the default 6379, so a
developer's own Redis is never touched), with nothing on disk, in its own session so a Ctrl-C in the
terminal reaches pytest alone and the plugin's teardown stops it.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

START_TIMEOUT_S = 10.0
# A free port can be taken between our probe and redis-server's bind: try a few.
START_ATTEMPTS = 3


class RedisServerMissing(RuntimeError):
    """No `redis-server` binary on PATH."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """One redis-server on 127.0.0.1:<free port>: `url`, `client()`, `flush()`, `close()`."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerMissing(
                "cogworker_redis_url starts a private redis-server, and none is on PATH: install Redis "
                "(Debian/Ubuntu: apt install redis-server; macOS: brew install redis) or put its "
                "directory on PATH"
            )
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-test-redis-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        for _ in range(START_ATTEMPTS):
            if self._start(free_port()):
                return
        log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        self.close()
        raise RuntimeError(f"redis-server did not start after {START_ATTEMPTS} attempts:\n{log}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A new client (replies decoded to str); the caller closes it."""
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=5)

    def flush(self) -> None:
        with contextlib.closing(self.client()) as conn:
            conn.flushall()

    def _start(self, port: int) -> bool:
        self.port = port
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
                    *("--dir", str(self.dir), "--daemonize", "no"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        with contextlib.closing(self.client()) as conn:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:  # exited: most likely the port was taken meanwhile
                    self.proc = None
                    return False
                # Ours answering, not another server that had the port first (ours then exits).
                with contextlib.suppress(redis.ConnectionError):
                    if conn.info("server").get("process_id") == self.proc.pid:
                        return True
                time.sleep(0.02)
        self.stop()
        return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
