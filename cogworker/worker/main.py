"""`cogworker run`: one worker process, exactly what each swarm child runs."""

from __future__ import annotations

import gc
import importlib
import signal
import sys
import traceback
from types import FrameType

import structlog

from cogworker import exitcodes, logs
from cogworker.api import client, registry
from cogworker.settings_fields import SettingsFields
from cogworker.worker.command_pipe import CommandPipe
from cogworker.worker.identity import make_identity
from cogworker.worker.launcher import Launcher
from cogworker.worker.supervisor_events import Reporter

log = structlog.get_logger("cogworker.worker")

# Signal -> launcher command. TERM/INT stop; USR1/TSTP quiet; TTIN dumps every thread's stack.
SIGNAL_COMMANDS = {
    signal.SIGTERM: "stop",
    signal.SIGINT: "stop",
    signal.SIGUSR1: "quiet",
    signal.SIGTSTP: "quiet",
    signal.SIGTTIN: "dump",
}


class BootError(Exception):
    """The app could not be loaded; the message says which module and why."""


def import_app(modules: tuple[str, ...]) -> None:
    """Import COGWORKER_REQUIRE's modules with the collector off (as it already is in a booting fork
    server): an app's import (Django, an ORM, its models) makes objects that live as long as the
    process, and each full collection on the way walks all of them again. A full collection follows
    anyway, before the objects are frozen (launcher.py, or the fork server after a preload)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                raise BootError(f"COGWORKER_REQUIRE: can't import {name!r}: {detail}") from exc
    finally:
        if was_on:
            gc.enable()


def run_worker(
    settings: SettingsFields,
    *,
    identity: str | None = None,
    report_fd: int | None = None,
    slot: int | None = None,
    app_loaded: bool = False,
    quiet: bool = False,
) -> int:
    """Run one worker until told to stop; returns the exit code. Logging must be configured."""
    # Handlers first: a TERM while a slow app is still importing is a stop, not a crash.
    commands = CommandPipe()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        commands.send(SIGNAL_COMMANDS[signal.Signals(signum)])

    for signum in SIGNAL_COMMANDS:
        signal.signal(signum, on_signal)
    if not app_loaded:
        try:
            import_app(settings.require_modules)
        except BootError as exc:
            log.error("boot_failed", error=str(exc))
            print(f"cogworker: {exc}", file=sys.stderr)
            if report_fd is not None:
                Reporter(report_fd).send("boot_error", error=str(exc))
            return exitcodes.BOOT_ERROR
    identity = identity or make_identity()
    logs.bind_process(identity=identity, **({"slot": slot} if slot is not None else {}))
    log_registered_jobs(settings.require_modules)
    client.configure(settings)
    launcher = Launcher(settings, identity, Reporter(report_fd), slot=slot, quiet=quiet, commands=commands)
    return launcher.run()


def log_registered_jobs(required: tuple[str, ...]) -> None:
    """Say what this worker can run, once the app is imported (here, or in a swarm's fork server with
    preload). A worker that knows no job still fetches, and files every job it takes as JobNotFound:
    the warning names the setting a user most often forgets."""
    names = registry.app_job_names()
    if names:
        log.info("jobs_registered", count=len(names))
        log.debug("jobs_registered_names", jobs=names)
    elif not required:
        log.warning(
            "no_jobs_registered",
            note="COGWORKER_REQUIRE is unset, so every job this worker fetches fails with JobNotFound: "
            "name the modules holding your @job functions in COGWORKER_REQUIRE, or run "
            "`cogworker run MODULE`",
        )
    else:
        # A package whose jobs live in submodules it doesn't import itself is fine (they are imported
        # when a job of theirs is fetched), but more often this is the wrong module.
        log.warning(
            "no_jobs_registered",
            require=",".join(required),
            note="COGWORKER_REQUIRE's modules define no @job; a job in a submodule of theirs is imported "
            "when first fetched, any other fails with JobNotFound",
        )


def main(settings: SettingsFields) -> int:
    logs.configure(settings.log_level, settings.log_format, settings.log_levels)
    return run_worker(settings)
