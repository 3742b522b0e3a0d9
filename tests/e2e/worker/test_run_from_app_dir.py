"""`cogworker run` in an app's directory imports the app from there, as a new user's first run does
(the quickstart): no PYTHONPATH, the console script as installed, like cogworker-swarm's children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis

from cogworker import exitcodes
from tests.support.redis_server import RedisServer, wait_until

RUN = Path(sys.executable).parent / "cogworker"  # the console script: its sys.path[0] is bin/, not here

APP = """\
import os

import redis

from cogworker import job


@job
def where(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:where", f"{tag} {os.getpid()}")
"""


def test_run_imports_the_app_from_the_working_directory(
    redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "beside_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_") and k != "PYTHONPATH"}
    env.update(COGWORKER_REDIS_URL=redis_server.url, COGWORKER_REQUIRE="beside_app")
    push = "import beside_app; beside_app.where.perform_async('first')"
    pushed = subprocess.run(
        [sys.executable, "-c", push], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert pushed.returncode == 0, pushed.stderr
    proc = subprocess.Popen(
        [str(RUN), "run"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        # A worker that can't import the app exits 3 at once: stop waiting then, and show why.
        line = wait_until(
            lambda: r.lindex("test:where", 0) or (proc.poll() is not None and f"exit {proc.returncode}"),
            timeout=30,
            message="the app's job to run",
        )
        assert line == f"first {proc.pid}", proc.stderr.read() if proc.stderr and proc.poll() else line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == exitcodes.OK, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
