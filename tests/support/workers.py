"""Real `cogworker run` processes for tests: started in their own session, logs captured to a file,
always stopped (and their session killed) at teardown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def log_events(path: Path) -> list[dict[str, Any]]:
    """Every JSON log line in `path` (other output, such as a traceback, is skipped)."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            found.append(item)
    return found


class Worker:
    def __init__(self, redis_url: str, **env: str) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="cogworker-worker-", suffix=".log")[1])
        full_env = dict(os.environ)
        full_env.update(
            COGWORKER_REDIS_URL=redis_url,
            COGWORKER_REQUIRE="demo_jobs",
            COGWORKER_LOG_FORMAT="json",
            COGWORKER_LOG_LEVEL="debug",
        )
        full_env.update(env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cogworker", "run"],
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with_suppress(lambda: os.killpg(self.proc.pid, signal.SIGKILL))
            self.proc.wait(timeout=10)

    def events(self) -> list[dict[str, Any]]:
        return log_events(self.log_path)

    def events_named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("event") == name]

    def identity(self, timeout: float = 45) -> str:
        """This worker's identity, from its `worker_ready` line: a job can start before that line is
        written, so a test that saw the job start must still wait for it."""
        deadline = time.monotonic() + timeout
        while not (ready := self.events_named("worker_ready")):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"worker {self.pid} logged no worker_ready:\n{self.log_text()[-2000:]}")
            time.sleep(0.02)
        return str(ready[0]["identity"])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def with_suppress(action: Any) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone: nothing to stop
        action()


class WorkerPool:
    """Tracks every worker a test starts, so teardown can stop them all."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.workers: list[Worker] = []

    def start(self, redis_url: str | None = None, **env: str) -> Worker:
        worker = Worker(redis_url or self.redis_url, **env)
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):  # killed just below
                    worker.stop(timeout=15)
            worker.kill()
            with_suppress(lambda w=worker: os.killpg(w.proc.pid, signal.SIGKILL))
            worker.log_path.unlink(missing_ok=True)


def worker_pool(redis_url: str) -> Iterator[WorkerPool]:
    """The body of each test folder's `workers` fixture."""
    with contextlib.closing(WorkerPool(redis_url)) as pool:
        yield pool
