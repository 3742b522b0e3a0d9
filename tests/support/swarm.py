"""Running the real `cogworker-swarm` in end-to-end tests (the tests are in tests/e2e/).

Each swarm runs in its own session (start_new_session=True) with its stderr in a file, so tests read
the supervisor's JSON log lines as events. At teardown the session group is killed, and the test fails
if any process of the session is still there: no zombie, no stray worker, after any test.

The test process makes itself a child subreaper while swarms run: children orphaned by a SIGKILLed
supervisor are then reparented to it instead of to PID 1 (which, in a container, may never reap them),
so their exits can be observed and reaped here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from supervisor import forkserver
from tests.support.redis_server import wait_until
from tests.support.workers import log_events

PR_SET_CHILD_SUBREAPER = 36

# Short everything: heartbeats (remote resume is read on a beat), deadlines, respawn backoff.
FAST_ENV = {
    "COGWORKER_REQUIRE": "demo_jobs",
    "COGWORKER_COUNT": "2",
    "COGWORKER_CONCURRENCY": "2",
    "COGWORKER_LOG_FORMAT": "json",
    "COGWORKER_LOG_LEVEL": "info",
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.3",
    "COGWORKER_TIMEOUT_S": "5",
    "COGWORKER_GRACEFUL_STOP_TIMEOUT_S": "10",
    "COGWORKER_RESPAWN_BASE_DELAY_S": "0.2",
    "COGWORKER_RESPAWN_MAX_DELAY_S": "1",
    "COGWORKER_HEALTHY_UPTIME_S": "2",
    "COGWORKER_RESTART_READY_TIMEOUT_S": "10",
}


def _set_subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)


def stays(predicate: Callable[[], Any], seconds: float, message: str = "condition") -> None:
    """Assert `predicate` holds for `seconds` (a negative check: something must NOT happen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{message} stopped holding"
        time.sleep(0.02)


def live_title(proc: psutil.Process) -> str | None:
    """The process's title, or None once it is exiting (its command line is gone) or a zombie."""
    try:
        title = " ".join(proc.cmdline())
        return title if title and proc.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def titles(pid: int) -> list[str]:
    """The command line (`ps -o args`) of the process `pid` and every process under it: what anyone
    on the host can read, so a secret must not show in it."""
    root = psutil.Process(pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            found.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, psutil.Error):
            continue
    return found


def is_forkserver(title: str) -> bool:
    """The supervisor's fork server (supervisor/forkserver/boot.py) sets this title; workers set their own."""
    return title.startswith(forkserver.TITLE)


class Swarm:
    """One `python -m supervisor.main` process and its log."""

    def __init__(
        self,
        redis_url: str,
        log_path: Path,
        env: dict[str, str],
        command: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.log_path = log_path
        full_env = dict(os.environ, COGWORKER_REDIS_URL=redis_url, **FAST_ENV)
        full_env.update(env)
        self.env = full_env
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command or [sys.executable, "-m", "supervisor.main"],
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=cwd,
            )
        self.pid = self.proc.pid

    # Log events -----------------------------------------------------------------------------
    def events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        return [
            item
            for item in log_events(self.log_path)
            if (name is None or item.get("event") == name) and all(item.get(k) == v for k, v in match.items())
        ]

    def supervisor_events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.events(name, **match) if e.get("role") == "swarm"]

    def wait_event(
        self, name: str, count: int = 1, timeout: float = 45, **match: Any
    ) -> list[dict[str, Any]]:
        return wait_until(
            lambda: (found := self.supervisor_events(name, **match)) and len(found) >= count and found,
            timeout=timeout,
            interval=0.02,
            message=f"{count}x {name} {match or ''} in the swarm log:\n{self.tail()}",
        )

    def wait_ready(self, ready: int | None = None, timeout: float = 45) -> None:
        """Until the latest capacity line says every slot (or `ready` of them) is ready."""
        want = ready if ready is not None else int(self.env["COGWORKER_COUNT"])

        def check() -> bool:
            lines = self.supervisor_events("swarm_capacity")
            return bool(lines) and lines[-1]["ready"] == want

        wait_until(check, timeout=timeout, interval=0.02, message=f"{want} ready children:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # Processes ------------------------------------------------------------------------------
    def children(self) -> list[psutil.Process]:
        """Live worker children of the supervisor (its fork server is not one)."""
        return [p for p, title in self._live_children() if not is_forkserver(title)]

    def forkservers(self) -> list[psutil.Process]:
        """The supervisor's live fork server processes (two while a restart loads new code)."""
        return [p for p, title in self._live_children() if is_forkserver(title)]

    def _live_children(self) -> list[tuple[psutil.Process, str]]:
        """(process, title) of each direct child; one that is exiting is left out of both lists."""
        with contextlib.suppress(psutil.Error):
            found = [(c, live_title(c)) for c in psutil.Process(self.pid).children()]
            return [(c, title) for c, title in found if title is not None]
        return []

    def current_children(self) -> dict[int, int]:
        """slot -> pid of the child serving it, from the log (started, minus exited and replaced)."""
        slots: dict[int, int] = {}
        for e in self.supervisor_events():
            fresh = e["event"] == "child_started" and e.get("replaces") is None
            if fresh or e["event"] == "child_replaced":
                slots[e["slot"]] = e["child_pid"]
            elif e["event"] == "child_exited" and slots.get(e["slot"]) == e["child_pid"]:
                del slots[e["slot"]]
        return slots

    def identities(self) -> dict[int, str]:
        """child pid -> identity, for every child ever started."""
        return {e["child_pid"]: e["child_identity"] for e in self.supervisor_events("child_started")}

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            # The log is in the test's tmp_path, gone a few runs later: a swarm that never exits
            # is diagnosed from what it wrote, so the failure carries it.
            raise AssertionError(f"the swarm did not exit within {timeout} s:\n{self.tail(60)}") from exc

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def session_processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and os.getsid(proc.pid) == self.pid:
                    found.append(proc)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return found

    def reap_orphans(self) -> None:
        """Reap session members reparented to us (we are a subreaper) that have exited."""
        for proc in self.session_processes():
            with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
                if proc.ppid() == os.getpid() and proc.pid != self.pid:
                    os.waitpid(proc.pid, os.WNOHANG)

    def leftovers(self) -> list[psutil.Process]:
        self.reap_orphans()
        return [p for p in self.session_processes() if p.pid != self.pid]


class SwarmRunner:
    """Starts swarms for one test; at teardown kills their sessions and fails on any leftover."""

    def __init__(self, redis_url: str, tmp_path: Path) -> None:
        self.redis_url = redis_url
        self.tmp_path = tmp_path
        self.swarms: list[Swarm] = []

    def start(
        self,
        redis_url: str | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
        **env: str,
    ) -> Swarm:
        log_path = self.tmp_path / f"swarm-{len(self.swarms)}.log"
        swarm = Swarm(redis_url or self.redis_url, log_path, env, command, cwd)
        self.swarms.append(swarm)
        return swarm

    def __enter__(self) -> SwarmRunner:
        _set_subreaper(True)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            problems = []
            for swarm in self.swarms:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(swarm.pid, signal.SIGCONT)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(swarm.pid, signal.SIGKILL)
                swarm.proc.wait(timeout=10)
                try:
                    wait_until(
                        lambda s=swarm: not s.leftovers(), timeout=5, message="the session to be empty"
                    )
                except TimeoutError:
                    problems.append(f"left in session {swarm.pid}: {swarm.leftovers()}")
            if problems and exc[0] is None:
                raise AssertionError("; ".join(problems))
        finally:
            _set_subreaper(False)


def swarm_runner(redis_url: str, tmp_path: Path) -> Iterator[SwarmRunner]:
    """The body of each test module's `swarms` fixture."""
    with SwarmRunner(redis_url, tmp_path) as runner:
        yield runner
