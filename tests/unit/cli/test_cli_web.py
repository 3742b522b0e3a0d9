"""`cogworker web` and `cogworker.web.create_app` as a user's first call: a fresh interpreter, configured
only by COGWORKER_* variables, in a subprocess with a deadline."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest
import redis

from cogworker.cli.web import is_loopback, listen_error
from cogworker.settings import load_settings
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, free_port, wait_until

TIMEOUT_S = 20


def env_only(url: str, **extra: str) -> dict[str, str]:
    env = clean_env(COGWORKER_REDIS_URL=url, **extra)
    return env


def run_cli(url: str, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *argv],
        env=env_only(url, **extra),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_off_loopback_without_credentials_it_refuses_in_one_line(redis_server: RedisServer) -> None:
    done = run_cli(redis_server.url, "web", COGWORKER_WEB_HOST="0.0.0.0")
    assert done.returncode == 78
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "not a loopback address" in lines[0]
    assert "COGWORKER_WEB_USERNAME" in lines[0]


@pytest.mark.parametrize(
    ("extra", "argv", "said"),
    [
        ({"COGWORKER_WEB_PORT": "70000"}, (), "COGWORKER_WEB_PORT"),
        ({"COGWORKER_WEB_USERNAME": "ops"}, (), "COGWORKER_WEB_PASSWORD"),
        ({}, ("--port", "0"), "not a TCP port"),
    ],
)
def test_bad_web_settings_exit_78_before_listening(
    redis_server: RedisServer, extra: dict[str, str], argv: tuple[str, ...], said: str
) -> None:
    done = run_cli(redis_server.url, "web", *argv, **extra)
    assert done.returncode == 78, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_loopback_rules() -> None:
    settings = load_settings(redis_url="redis://127.0.0.1:6379/0")
    for host in ("127.0.0.1", "127.5.0.1", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        assert listen_error(settings, host, 7433) is None
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.com"):
        assert not is_loopback(host), host
        assert listen_error(settings, host, 7433) is not None
    with_credentials = load_settings(
        redis_url="redis://127.0.0.1:6379/0", web_username="ops", web_password="pw"
    )
    assert listen_error(with_credentials, "0.0.0.0", 7433) is None


def _get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_it_serves_the_ui_on_loopback_and_stops_with_exit_0(
    redis_server: RedisServer, r: redis.Redis, stop: signal.Signals
) -> None:
    r.set("cogworker:stat:processed", 42)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cogworker", "web", "--port", str(port)],
        env=env_only(redis_server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answer = wait_until(lambda: _get(f"http://127.0.0.1:{port}/"), TIMEOUT_S, message="the UI answering")
        assert answer[0] == 200
        assert 'data-processed="42"' in answer[1]
        proc.send_signal(stop)
        assert proc.wait(timeout=TIMEOUT_S) == 0
        assert f"serving http://127.0.0.1:{port}/" in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_create_app_as_a_first_call_configured_by_the_environment(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    r.set("cogworker:stat:failed", 7)
    code = textwrap.dedent(
        """
        import cogworker.web
        from starlette.testclient import TestClient
        response = TestClient(cogworker.web.create_app()).get("/")
        print(response.status_code, 'data-failed="7"' in response.text)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env_only(redis_server.url),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "True"]
