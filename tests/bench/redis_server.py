"""The one private redis-server a benchmark run uses, and reading its command counters."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import jobkit
import redis
from procs import placement

# INFO is how the harness reads the counters; it is never a system's own work.
_IGNORED = {"info"}
SCRIPT_COMMANDS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A throwaway redis-server on 127.0.0.1: no persistence, its files in a temp dir."""

    def __init__(self, env: dict[str, str], one_session: bool) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = Path(tempfile.mkdtemp(prefix="cogworker-bench-redis-"))
        self._env = env
        self._one_session = one_session
        self._proc: subprocess.Popen[bytes] | None = None
        self.client: redis.Redis | None = None

    def start(self) -> None:
        argv = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._dir),
            "--daemonize", "no",
            "--loglevel", "warning",
        ]  # fmt: skip
        new_session, group = placement(self._one_session)
        log = open(self._dir / "redis.log", "wb")  # noqa: SIM115 - owned by the child
        self._proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env,
            start_new_session=new_session,
            process_group=group,
        )
        log.close()
        self.client = jobkit.connect(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {self.log_tail()}") from None
                time.sleep(0.05)

    def log_tail(self) -> str:
        path = self._dir / "redis.log"
        return path.read_text(errors="replace")[-500:] if path.exists() else ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def version(self) -> str:
        assert self.client is not None
        return str(self.client.info("server")["redis_version"])

    def flush(self) -> None:
        assert self.client is not None
        self.client.flushdb()

    def cpu_s(self) -> float:
        """CPU seconds redis-server has used so far (user + system, its own INFO)."""
        assert self.client is not None
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def commandstats(self) -> dict[str, int]:
        """Calls per command so far. Redis counts a command a script runs under its own name too."""
        assert self.client is not None
        stats = self.client.info("commandstats")
        calls: dict[str, int] = {}
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            if name not in _IGNORED:
                calls[name] = int(value["calls"])
        return calls

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command between two commandstats snapshots, without the zeros."""
    diff = {name: after[name] - before.get(name, 0) for name in after}
    return {name: n for name, n in sorted(diff.items()) if n}
