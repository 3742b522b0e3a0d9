"""The calls the supervisor's loop makes on processes that are not its own pipes: signal a child, reap
the children that exited, set its own process title.

They are gathered in one object so that tests can run the whole Swarm in process, with a fake clock
and a fake spawner, and see what it would have signalled and reaped without any real child (see
tests/unit/supervisor/test_swarm_inprocess.py). Production uses the defaults.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from setproctitle import setproctitle


def send_signal(pid: int, signum: int) -> None:
    # The pid can't have been reused: an unreaped child keeps it, even as a zombie.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def reap_exited() -> Iterator[tuple[int, int]]:
    """(pid, exit code) for every child that has exited, reaped one at a time as the caller asks
    for the next, so a child that exits while an earlier one is handled is reaped in the same turn.
    The exit code is os.waitstatus_to_exitcode's: negative for "killed by signal -code"."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


@dataclass(frozen=True, slots=True)
class System:
    send_signal: Callable[[int, int], None] = send_signal
    reap: Callable[[], Iterator[tuple[int, int]]] = reap_exited
    set_title: Callable[[str], None] = setproctitle


DEFAULT_SYSTEM = System()
