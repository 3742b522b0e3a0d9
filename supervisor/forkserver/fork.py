"""In the fork server: forking a worker, and everything the worker does before it runs jobs.

The fork server forks twice: an intermediate process forks the worker and exits at once, so the
worker is re-parented to the supervisor, which is a child subreaper (PR_SET_CHILD_SUBREAPER). The
supervisor reaps its workers and sees their exit status as if it had forked them, while the pages
they share (the worker code, and the app with preload) belong to the fork server, not to it.

Fork hygiene lives here (dramatiq's cli.py and gunicorn's spawn_worker do the same): handled signals
stay blocked across the forks, the worker dies with the supervisor, drops the fork server's file
descriptors, scrubs systemd's variables, reseeds random, resets pools and logging, sets its title,
then runs exactly what `cogworker run` runs.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes, logs
from cogworker.api import client
from cogworker.settings_fields import SettingsFields
from cogworker.worker.identity import make_identity
from supervisor import signals
from supervisor.children.env import scrub_child_env
from supervisor.children.exit import exit_child
from supervisor.forkserver.cpu_affinity import Pinning, pin_worker
from supervisor.forkserver.pin_probe import PinProbe
from supervisor.parent_death import die_with_parent

REPARENT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class WorkerOrder:
    """What one worker is forked with."""

    settings: SettingsFields
    slot: int
    nonce: str  # chosen by the supervisor: with the pid, the worker's identity
    report_fd: int  # write end of the state pipe the supervisor reads
    supervisor_pid: int
    app_loaded: bool
    quiet: bool


def fork_worker(order: WorkerOrder, close_in_child: Callable[[], None]) -> int:
    """Fork a worker; returns its pid once it is the supervisor's child. Raises OSError when a fork
    fails. The caller closes `order.report_fd`."""
    pid_read, pid_write = os.pipe()
    # Unflushed output would be written twice, once by each process.
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        middle = os.fork()
    except OSError:
        os.close(pid_read)
        os.close(pid_write)
        raise
    # Every swarm test runs the intermediate, but coverage can't see it: the tracer coverage restarts
    # after a fork only traces frames entered afterwards, and the intermediate stays in this one.
    if middle == 0:  # pragma: no cover  (the intermediate: fork the worker, say its pid, exit)
        code = exitcodes.FAILURE
        try:
            os.close(pid_read)
            worker = os.fork()
            if worker == 0:
                os.close(pid_write)
                _run_child(order, close_in_child)
            os.write(pid_write, str(worker).encode())
            code = exitcodes.OK
        finally:
            os._exit(code)
    os.close(pid_write)
    with os.fdopen(pid_read, "rb") as reader:
        answer = reader.read()
    os.waitpid(middle, 0)  # once it is reaped, the worker's parent is the supervisor
    if not answer:
        raise OSError(f"the intermediate process for slot {order.slot} could not fork the worker")
    return int(answer)


def _run_child(order: WorkerOrder, close_in_child: Callable[[], None]) -> NoReturn:
    """The worker: never returns."""

    def body() -> int:
        close_in_child()
        return _become_worker(order)

    exit_child(body)


def _become_worker(order: WorkerOrder) -> int:
    settings = order.settings
    if not await_supervisor_as_parent(order.supervisor_pid):
        return exitcodes.FAILURE  # the supervisor died, or isn't our subreaper: never run unsupervised
    # Before any thread starts: each inherits the mask (cpu_affinity.py).
    pinned: Pinning | OSError | None
    try:
        pinned = pin_worker(settings.cpu_affinity, order.slot, settings.count)
    except OSError as exc:
        pinned = exc
    # Handlers first, then the mask: a TERM that arrived since fork now gets the default action
    # (the child holds no job yet), instead of being held back until the app has imported.
    signals.reset_to_default()
    signals.unblock()
    scrub_child_env(os.environ)
    random.seed()
    client.reset_after_fork()
    logs.configure(settings.log_level, settings.log_format, settings.log_levels)
    _log_pinning(order.slot, pinned)
    if settings.cpu_affinity == "auto" and isinstance(pinned, Pinning):
        PinProbe(pinned, order.slot, settings.cpu_affinity_probe_interval_s).start()
    setproctitle(f"cogworker worker [slot {order.slot}] booting")
    # The write end stays blocking: a status line carrying per-job counts can outgrow PIPE_BUF, and a
    # non-blocking write of it could be cut short, losing the line and garbling the next. Only the
    # child's main thread writes, and the supervisor's loop reads at once; the 64 KiB pipe buffer
    # holds minutes of lines should it stall.
    from cogworker.worker.main import run_worker

    return run_worker(
        settings,
        identity=make_identity(os.getpid(), order.nonce),
        report_fd=order.report_fd,
        slot=order.slot,
        app_loaded=order.app_loaded,
        quiet=order.quiet,
    )


def _log_pinning(slot: int, pinned: Pinning | OSError | None) -> None:
    log = structlog.get_logger("cogworker.worker")
    if isinstance(pinned, OSError):
        # A CPU taken away since the swarm started (a shrunk cpuset): run anywhere rather than not at all.
        log.warning("cpu_affinity_failed", slot=slot, error=str(pinned), note="running unpinned")
    elif pinned is not None:
        log.info("worker_pinned", slot=slot, cpu=pinned.cpu)


def await_supervisor_as_parent(supervisor_pid: int) -> bool:
    """Wait for the intermediate process to exit (it does at once), then die with the supervisor.

    PR_SET_PDEATHSIG fires when the parent at the time of the call dies, so it is set only after the
    re-parenting; the check after it covers a supervisor that died in between."""
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    while os.getppid() != supervisor_pid:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)  # a poll of our own parent pid; the intermediate exits within microseconds
    die_with_parent()
    return os.getppid() == supervisor_pid
