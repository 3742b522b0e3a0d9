"""`cogworker` verbs as real commands: exit codes and the one line they print on failure."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, free_port


def run(*argv: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = clean_env(COGWORKER_REDIS_URL=url, **env)
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *argv], env=clean, capture_output=True, text=True, timeout=30
    )


def test_unreachable_redis_is_one_line_and_exit_1() -> None:
    port = free_port()
    done = run("status", url=f"redis://:hunter2@127.0.0.1:{port}/0")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"cogworker: can't reach Redis at redis://:***@127.0.0.1:{port}/0: ")
    assert "hunter2" not in done.stderr
    assert done.stdout == ""


def test_usage_and_settings_errors(redis_server: RedisServer) -> None:
    assert run("dead", url=redis_server.url).returncode == 2  # more usage errors are tested in-process
    bad = run("status", url=redis_server.url, COGWORKER_CONCURRENCY="0")
    assert bad.returncode == 78
    assert (
        bad.stderr.strip() == "cogworker: configuration error: COGWORKER_CONCURRENCY='0': must be 1 or more"
    )


def test_doctor_fail_exits_1_and_json_is_clean(private_redis: RedisServer) -> None:
    client = private_redis.client()
    client.config_set("maxmemory-policy", "volatile-lru")
    done = run("doctor", "--json", url=private_redis.url)
    assert done.returncode == 1
    report = json.loads(done.stdout)  # logs go to stderr, never into the JSON
    assert report["ok"] is False
    assert {"name": "maxmemory-policy", "level": "FAIL"}.items() <= report["checks"][1].items()
    client.config_set("maxmemory-policy", "noeviction")
    assert run("doctor", url=private_redis.url).returncode == 0
    client.close()


def test_names_that_arent_utf8_are_one_line_and_exit_2(redis_server: RedisServer, r: object) -> None:
    # Real argv bytes: Python hands a byte that isn't UTF-8 on as a lone surrogate.
    clean = clean_env(COGWORKER_REDIS_URL=redis_server.url)
    for argv in ([b"enqueue", b"bad\xffname"], [b"queue", b"pause", b"q\xff"]):
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"cogworker", *argv], env=clean, capture_output=True, timeout=30
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in lines[0], done.stderr
        assert lines[0].startswith("cogworker: ") and "\\xff" in lines[0]
