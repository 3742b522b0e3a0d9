"""Private redis-server processes for tests: free ports, stop/restart/SIGSTOP, always torn down."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.01, message: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class RedisServer:
    """One redis-server on 127.0.0.1:<port> (and on `bind_also`, e.g. simulated hosts' addresses),
    nothing on disk."""

    def __init__(
        self,
        port: int | None = None,
        *,
        persistent: bool = False,
        extra: tuple[str, ...] = (),
        bind_also: tuple[str, ...] = (),
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: run `make install` (it installs one) or install Redis"
            )
        self.binary = binary
        self.port = port or free_port()
        # Persistent: an append-only file synced on every write, so a restart keeps every job.
        self.persistent = persistent
        self.extra = extra
        self.bind = ("127.0.0.1", *bind_also)
        self.dir = tempfile.mkdtemp(prefix="cogworker-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.start()
        except BaseException:
            # Started but not answering, or interrupted while waiting: the caller never gets this
            # object, so nothing else would stop the process.
            self.close()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=5)

    def start(self) -> None:
        log = open(Path(self.dir) / "redis.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                self.binary,
                *("--port", str(self.port), "--save", ""),
                "--bind",
                *self.bind,
                # Protected mode refuses clients from anywhere but loopback when no password is set;
                # the extra addresses are test-only veth ends (tests/support/netns_hosts.py).
                *("--protected-mode", "no" if len(self.bind) > 1 else "yes"),
                *("--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always"),
                *("--dir", self.dir, "--daemonize", "no"),
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        client = self.client()
        wait_until(lambda: self._ping(client), timeout=10, message=f"redis-server on port {self.port}")
        client.close()

    @staticmethod
    def _ping(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a paused server can't exit on TERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
