"""Running `cogworker` verbs in-process (stdout/stderr captured) and real `cogworker run` workers."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from cogworker.cli.main import main
from tests.support.daemon_env import clean_env, use_only
from tests.support.redis_server import RedisServer, wait_until


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class CLI:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        code = main(list(argv))
        out, err = self._capsys.readouterr()
        return Result(code, out, err)


@pytest.fixture(name="cli")
def cli_fixture(
    redis_server: RedisServer,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> CLI:
    """`cli("status", "--json")` runs the verb against the session's (flushed) Redis."""
    use_only(monkeypatch, {"COGWORKER_REDIS_URL": redis_server.url, "COGWORKER_LOG_FORMAT": "json"})
    return CLI(capsys)


def worker_env(url: str, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(
        COGWORKER_REDIS_URL=url,
        COGWORKER_REQUIRE="demo_jobs",
        COGWORKER_HEARTBEAT_INTERVAL_S="0.2",
        COGWORKER_CONCURRENCY="2",
        COGWORKER_LOG_FORMAT="json",
        COGWORKER_LOG_LEVEL="warning",
    )
    env.update(extra)
    return env


class Workers:
    """`cogworker run` processes in their own sessions; `close()` SIGTERMs the ones still running
    and checks that each exited 0."""

    def __init__(self, url: str, client: redis.Redis) -> None:
        self.url = url
        self.client = client
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **extra: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cogworker", "run"],
            env=worker_env(self.url, **extra),
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def identity(self, proc: subprocess.Popen[bytes], timeout: float = 45) -> str:
        """The identity of `proc` once it has beaten (its presence hash exists)."""

        def find() -> str | None:
            for identity in self.client.smembers("cogworker:processes"):
                info = self.client.hget(f"cogworker:process:{identity}", "info")
                if info and json.loads(info)["pid"] == proc.pid:
                    return str(identity)
            return None

        found: str = wait_until(find, timeout=timeout, message=f"worker pid {proc.pid} to beat")
        return found

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=20))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append("hung")
        assert all(code == 0 for code in codes), f"worker exit codes: {codes}"


@pytest.fixture(name="workers")
def workers_fixture(redis_server: RedisServer, r: redis.Redis) -> Iterator[Workers]:
    pool = Workers(redis_server.url, r)
    try:
        yield pool
    finally:
        pool.close()


class FakeTerminal(io.StringIO):
    """Typed answers on a stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True
