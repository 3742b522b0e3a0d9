"""`cogworker web`: uvicorn's own lines go through cogworker's handler, as JSON lines like the app's,
instead of uvicorn's format in the middle of the stream."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import redis

from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, free_port, wait_until


def _refused(port: int) -> bool:
    """Sends bytes that aren't HTTP; True once the server answered them (with a 400)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            return conn.recv(100).startswith(b"HTTP/1.1 400")
    except OSError:
        return False


def test_uvicorns_warning_is_a_json_line(redis_server: RedisServer, r: redis.Redis) -> None:
    port = free_port()
    env = clean_env(COGWORKER_REDIS_URL=redis_server.url, COGWORKER_LOG_FORMAT="json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cogworker", "web", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # A server that exits (its port taken in the meantime) fails here with its own words, not
        # as a wait for an answer that can't come.
        answered = wait_until(
            lambda: "exited" if proc.poll() is not None else _refused(port),
            timeout=60,
            message="uvicorn answering a bad request",
        )
        said = proc.stderr.read() if proc.stderr and answered == "exited" else ""
        assert answered is True, f"cogworker web exited ({proc.returncode}): {said}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in stderr.splitlines() if "Invalid HTTP request" in line]
    assert lines, stderr
    line = json.loads(lines[0])
    assert (line["event"], line["level"], line["logger"]) == (
        "Invalid HTTP request received.",
        "warning",
        "uvicorn.error",
    )
    assert line["pid"] == proc.pid and line["timestamp"].endswith("Z")
