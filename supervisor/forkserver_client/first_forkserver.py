"""The swarm's first fork server, forked from the supervisor itself rather than started as a new
interpreter (issue 18: start-up).

Every fork server loads the worker code and the settings before the first worker can be forked, so
its start is on the way to every swarm's first job. A new interpreter (`python -m
supervisor.forkserver.main`, handle.py) spends 15 to 25 ms on its own start before it
imports anything. At launch the supervisor has imported nothing heavy and started no thread yet, and
the code on disk is the code it was started with, so a fork of it is as fresh as a new interpreter:
the child goes straight to the fork server's imports. A restart's fork server, which must load the
code on disk now, and any replacement, started once the supervisor holds its loop's state and may
run threads (the metrics server's), are new interpreters.

The child is made to look like a `python -m` start: the handled signals blocked with default actions,
only the control socket inherited, systemd's variables scrubbed, and its working directory first on
sys.path (an app beside it is importable by COGWORKER_REQUIRE). It never returns to the supervisor's
code: it leaves with os._exit and the fork server's exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterable

from cogworker import exitcodes
from supervisor import signals
from supervisor.children.env import scrub_child_env
from supervisor.children.exit import exit_child
from supervisor.wire.forkserver_messages import CONTROL_FD_VARIABLE, SUPERVISOR_PID_VARIABLE


def fork_first_forkserver(theirs: socket.socket, close_in_child: Iterable[int]) -> int:
    """Fork the fork server; returns its pid. `theirs` is its end of the control socket; the file
    descriptors in `close_in_child` are the supervisor's (its end, the signal pipe). Call it before any
    thread starts. Raises OSError when the fork fails."""
    supervisor_pid = os.getpid()
    to_close = list(close_in_child)
    # Unflushed output would be written twice, once by each process.
    sys.stdout.flush()
    sys.stderr.flush()
    # Blocked across the fork: a signal in between is the supervisor's, or stays pending in the child
    # (a fork server keeps them blocked for life, as a spawned one does).
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals.HANDLED)
    try:
        pid = os.fork()
    finally:
        if os.getpid() == supervisor_pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if pid == 0:
        exit_child(lambda: _become_forkserver(theirs, to_close, supervisor_pid))
    return pid


def _become_forkserver(theirs: socket.socket, to_close: list[int], supervisor_pid: int) -> int:
    """The child's body (run by exit_child, so it never returns to the supervisor's code)."""
    signals.reset_to_default()  # the supervisor's handlers write to its signal pipe
    for fd in to_close:
        with contextlib.suppress(OSError):
            os.close(fd)
    scrub_child_env(os.environ)
    os.environ[CONTROL_FD_VARIABLE] = str(theirs.detach())
    os.environ[SUPERVISOR_PID_VARIABLE] = str(supervisor_pid)
    # As `python -m` has it: the working directory first, where the console script's is now.
    sys.path[0] = os.getcwd()
    from supervisor.forkserver.main import main

    try:
        return main()
    except SystemExit as exc:  # a bad setting exits 78 from inside boot, as it does in a spawned one
        return exc.code if isinstance(exc.code, int) else exitcodes.FAILURE
