"""The fork server's settings, checked in a process of its own while the fork server imports the worker
code beside it.

pydantic and pydantic-settings are a third of a fork server's imports (~90 ms on the way to a swarm's
first job and every restart's), and nothing after the check needs them: the fork server and its
workers hold a PlainSettings (cogworker/settings_fields.py). So main.py forks this check first thing;
the child validates the environment with cogworker.settings (a bad setting prints its one line and
exits 78, as before), writes the values to a pipe as JSON and exits, while its parent runs its own
imports on the other CPU. boot.py then reads the values, or the child's exit code, which the fork
server exits with, and the supervisor after it, before READY. `cogworker run` checks its settings the
same way, with its options as overrides (cogworker/cli/run_fast.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Mapping

from cogworker import exitcodes
from cogworker.settings_fields import PlainSettings, values_of
from supervisor.children.exit import exit_child
from supervisor.parent_death import die_with_parent
from supervisor.wire.forkserver_messages import CONTROL_FD_VARIABLE, SUPERVISOR_PID_VARIABLE


class SettingsCheck:
    """A running check; `result` waits for it."""

    def __init__(self, pid: int, reading: int) -> None:
        self.pid = pid
        self._reading = reading

    @classmethod
    def start(cls, overrides: Mapping[str, object] | None = None) -> SettingsCheck:
        """Fork the check; `overrides` win over the environment (load_settings's keywords). Raises
        OSError when the fork fails."""
        reading, writing = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reading)
            exit_child(lambda: _check(writing, overrides or {}))
        os.close(writing)
        return cls(pid, reading)

    def result(self) -> PlainSettings | int:
        """The checked settings, or the exit code to leave with when the check failed."""
        with os.fdopen(self._reading, "rb") as pipe:
            written = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not written:
            return code if code > 0 else exitcodes.FAILURE  # killed by a signal: no code of its own
        return PlainSettings(json.loads(written))


def _check(writing: int, overrides: Mapping[str, object]) -> int:
    die_with_parent()
    # Under `cogworker run` in a terminal, a Ctrl-C reaches this child too: it ends quietly, and the
    # parent says what it says. (A fork server's check has it blocked, at its default action already.)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The supervisor's socket is the fork server's alone: a copy here would hide its closing. Its two
    # variables are the fork server's too, not settings, which load_or_exit would warn about.
    control_fd = os.environ.pop(CONTROL_FD_VARIABLE, "")
    os.environ.pop(SUPERVISOR_PID_VARIABLE, None)
    if control_fd.isdigit():
        with contextlib.suppress(OSError):
            os.close(int(control_fd))
    from cogworker.settings import load_or_exit

    try:
        settings = load_or_exit(**overrides)
    except SystemExit as exc:  # the line naming the bad setting is printed; 78 is passed on
        return exc.code if isinstance(exc.code, int) else exitcodes.FAILURE
    with os.fdopen(writing, "wb") as pipe:
        pipe.write(json.dumps(values_of(settings, reveal=True)).encode())
    return exitcodes.OK
