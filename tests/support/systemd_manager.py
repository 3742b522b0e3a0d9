"""A real systemd user manager for tests, private to one test (tests/systemd/*.sh do the namespaces).

    with user_manager(tmp_path) as manager:
        manager.install_unit("demo.service", "[Service]\\nType=notify\\nExecStart=...")
        manager.systemctl("start", "demo.service", check=True)
        manager.wait_for("demo.service", "ActiveState", "active")

The manager runs in its own mount and cgroup namespaces, so units behave as under the real thing
(Type=notify, watchdog, KillMode=, User=, ProtectSystem=) without systemd being PID 1 here. It needs
root; `user_manager` skips the test, saying why, where that or a tool is missing. Start-up takes a
few hundred milliseconds and teardown always runs, also when the manager failed to come up.

Units, home and logs go in a fresh directory under the test's tmp_dir. The runtime directory (the
notify socket, the manager's private socket) goes under /run instead: a unit with PrivateTmp=yes, like
cogworker@.service, can't see a notify socket under /tmp, and a unix socket path must be short.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import TESTS

SCRIPTS = TESTS / "systemd"
START = SCRIPTS / "start-manager.sh"
STOP = SCRIPTS / "stop-manager.sh"

STARTUP_TIMEOUT_S = 15.0


def _systemd_binary() -> str | None:
    for candidate in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd", shutil.which("systemd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def skip_reason() -> str | None:
    """Why a user manager can't run here, or None when it can."""
    if os.geteuid() != 0:
        return "a private systemd manager needs root (mount and cgroup namespaces)"
    if _systemd_binary() is None:
        return "no systemd binary"
    for tool in ("unshare", "systemctl"):
        if shutil.which(tool) is None:
            return f"no {tool} binary"
    return None


def exec_arg(arg: str) -> str:
    """`arg` as one quoted word for ExecStart= (e.g. the CODE of `python -c CODE`).

    C escapes for systemd's parser, and $$ and %% so that it expands no variables or specifiers.
    """
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


class UserManager:
    """Handle on a running manager: systemctl, unit properties, the log."""

    def __init__(self, directory: Path, run_dir: Path, cgroup_name: str, pid: int) -> None:
        self.dir = directory
        self.run_dir = run_dir
        self.cgroup_name = cgroup_name
        self.pid = pid
        self.units_dir = directory / "units"
        self.log_path = directory / "logs" / "manager.log"
        self.env = dict(os.environ, XDG_RUNTIME_DIR=str(run_dir))
        # Without a session bus address systemctl --user talks to the manager's private socket in
        # XDG_RUNTIME_DIR; with the host's, it would look for a bus that doesn't know this manager.
        self.env.pop("DBUS_SESSION_BUS_ADDRESS", None)

    def systemctl(
        self, *args: str, check: bool = False, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """`systemctl --user ARGS` against this manager; check=True fails with its output and the log."""
        result = subprocess.run(
            ["systemctl", "--user", "--no-pager", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"systemctl --user {' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{self._log_tail()}"
            )
        return result

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """Properties of `unit` (`systemctl show -p ...`), all of them when none are named."""
        args = ["show", unit]
        if props:
            args += ["-p", ",".join(props)]
        out = self.systemctl(*args, check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_for(self, unit: str, prop: str, value: str, timeout: float = 10.0) -> dict[str, str]:
        """Poll until `prop` of `unit` equals `value`; returns the unit's state at that moment.

        Fails after `timeout` seconds with the last values seen and the tail of the manager's log.
        """
        names = dict.fromkeys((prop, "ActiveState", "SubState", "Result", "StatusText"))
        deadline = time.monotonic() + timeout
        while True:
            state = self.show(unit, *names)
            if state.get(prop) == value:
                return state
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{unit}: {prop} is {state.get(prop)!r}, not {value!r}, after {timeout}s; "
                    f"state {state}\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def install_unit(self, name: str, text: str) -> Path:
        """Write a unit into the manager's unit directory and make the manager read it."""
        path = self.units_dir / name
        path.write_text(text)
        self.systemctl("daemon-reload", check=True)
        return path

    def log_text(self) -> str:
        """DIR/logs/manager.log: the manager's log and every service's stdout and stderr."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _log_tail(self, lines: int = 40) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- {self.log_path} (last {len(tail)} lines) ---\n" + "\n".join(tail)


@contextlib.contextmanager
def user_manager(tmp_dir: Path) -> Iterator[UserManager]:
    """Start a private systemd user manager under `tmp_dir`, yield it, and always tear it down."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="sdm-", dir=tmp_dir))
    # Unique per use: concurrent managers (xdist, or nested use) must not share a cgroup or sockets.
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    cgroup_name = f"cogworker-test-{token}"
    run_dir = Path("/run") / f"cogworker-sdm-{token}"
    scripts_args = [str(directory), cgroup_name, str(run_dir)]
    env = dict(os.environ, SYSTEMD_BIN=str(_systemd_binary()), PYTHON=sys.executable)
    env.pop("COGWORKER_SDM_STAGE", None)
    proc = subprocess.Popen([str(START), *scripts_args], env=env)
    # The scripts exec into one another and then into systemd: proc.pid is the manager's PID.
    manager = UserManager(directory, run_dir, cgroup_name, proc.pid)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        # `is-system-running` says "offline" for a user manager; SystemState is what turns "running".
        while manager.systemctl("show", "-p", "SystemState", "--value").stdout.strip() != "running":
            if proc.poll() is not None:
                raise RuntimeError(f"systemd user manager exited {proc.returncode}\n{manager._log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"systemd user manager not running after {STARTUP_TIMEOUT_S}s\n{manager._log_tail()}"
                )
            time.sleep(0.01)
        # A unit with a non-root User= must reach the notify socket to send READY=1.
        run_dir.chmod(0o711)
        (run_dir / "systemd" / "notify").chmod(0o777)
        yield manager
    finally:
        # stop-manager.sh also removes run_dir; DIR stays, with the log, for a post-mortem.
        subprocess.run([str(STOP), str(proc.pid), *scripts_args], timeout=60)
        # Reaping here, after stop-manager.sh: it tells an exited manager by its zombie state.
        proc.wait(timeout=30)
