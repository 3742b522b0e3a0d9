"""Forking a worker child, and everything the child does before it becomes a worker.

Fork hygiene lives in this one place (dramatiq's cli.py and gunicorn's spawn_worker do the same): block
signals around fork, die with the supervisor, drop the supervisor's handlers and file descriptors,
scrub systemd's variables, reseed random, reset pools and logging, set the title, then run exactly what
`cogworker run` runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import secrets
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from setproctitle import setproctitle

from cogworker import client, exitcodes, logs
from cogworker.identity import make_identity
from cogworker.settings import Settings
from supervisor import signals

PR_SET_PDEATHSIG = 1
SYSTEMD_CHILD_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


@dataclass(frozen=True, slots=True)
class Spawned:
    pid: int
    identity: str
    fd: int  # read end of the child's state pipe, non-blocking


def spawn(
    settings: Settings,
    slot: int,
    *,
    app_loaded: bool,
    quiet: bool,
    close_in_child: Callable[[], None],
) -> Spawned:
    """Fork one worker child for `slot`. Raises OSError when fork fails (the caller retries later).

    `close_in_child` runs first thing in the child and closes what the supervisor holds: its signal
    pipe, the selector, other children's pipes, sockets.
    """
    # Chosen before fork, so the supervisor knows the child's identity (and its in-progress list)
    # even if the child dies before saying a word.
    nonce = secrets.token_hex(4)
    read_fd, write_fd = os.pipe()
    parent_pid = os.getpid()
    # Unflushed output would be written twice, once by each process.
    sys.stdout.flush()
    sys.stderr.flush()
    mask = signals.block()
    try:
        pid = os.fork()
    except OSError:
        signals.restore(mask)
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # the child: never returns
        code = exitcodes.FAILURE
        try:
            os.close(read_fd)
            close_in_child()
            code = _become_worker(settings, slot, nonce, write_fd, parent_pid, mask, app_loaded, quiet)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    signals.restore(mask)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return Spawned(pid, make_identity(pid, nonce), read_fd)


def _become_worker(
    settings: Settings,
    slot: int,
    nonce: str,
    write_fd: int,
    parent_pid: int,
    mask: set[int],
    app_loaded: bool,
    quiet: bool,
) -> int:
    die_with_parent()
    if os.getppid() != parent_pid:
        return exitcodes.FAILURE  # the supervisor died before PDEATHSIG was armed
    # Handlers first, then the mask: a TERM that arrived since fork now gets the default action
    # (the child holds no job yet), instead of a handler writing to a pipe nobody reads.
    signals.reset_to_default()
    signals.restore(mask)
    scrub_environment()
    random.seed()
    client.reset_after_fork()
    logs.configure(settings.log_level, settings.log_format)
    setproctitle(f"cogworker worker [slot {slot}] booting")
    # The write end stays blocking: a status line carrying per-job counts can outgrow PIPE_BUF, and a
    # non-blocking write of it could be cut short, losing the line and garbling the next. Only the
    # child's main thread writes, and the supervisor's loop reads at once; the 64 KiB pipe buffer
    # holds minutes of lines should it stall.
    from cogworker.worker import run_worker

    return run_worker(
        settings,
        identity=make_identity(os.getpid(), nonce),
        report_fd=write_fd,
        slot=slot,
        app_loaded=app_loaded,
        quiet=quiet,
    )


def die_with_parent() -> None:
    """PR_SET_PDEATHSIG(SIGKILL): a SIGKILLed supervisor leaves no worker running unsupervised.

    The Reporter's getppid() check (constructed after fork) is the portable backstop."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def scrub_environment() -> None:
    """Children never inherit NOTIFY_SOCKET or WATCHDOG_* (DESIGN §6): a child could otherwise
    speak for the swarm to systemd, or keep its watchdog fed after the supervisor's loop hung."""
    try:
        from supervisor.notify import scrub_child_env
    except ImportError:
        for name in SYSTEMD_CHILD_VARIABLES:
            os.environ.pop(name, None)
    else:
        scrub_child_env(os.environ)
