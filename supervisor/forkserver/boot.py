"""The fork server's boot and request loop, run by main.py (the entry point) with the collector off.

It takes the settings from the check that main.py started (settings_check.py: a bad one exits 78, before
anything is forked), imports the worker code and, with COGWORKER_PRELOAD, the app, freezes all of it out
of the collector's reach, and then serves the supervisor's requests (server.py): it forks workers
(fork.py), so they share those pages with it, and requeues the jobs of children that died
(redis_requeue.py), since the supervisor itself holds no Redis client.

It leaves signals to the supervisor (they arrive blocked), dies with it (PR_SET_PDEATHSIG), and exits
when the supervisor closes its side of the control socket.
"""

from __future__ import annotations

import gc
import os
import socket
import sys

import structlog
from setproctitle import setproctitle

from cogworker import exitcodes, logs
from cogworker.settings_fields import values_of
from cogworker.store import shards
from cogworker.worker.main import BootError, import_app
from cogworker.worker.warm_up import warm_up
from supervisor.forkserver import TITLE
from supervisor.forkserver.server import ForkServer
from supervisor.forkserver.settings_check import SettingsCheck
from supervisor.parent_death import die_with_parent
from supervisor.wire.forkserver_messages import CONTROL_FD_VARIABLE, SUPERVISOR_PID_VARIABLE, send

log = structlog.get_logger("cogworker.forkserver")


def boot(check: SettingsCheck) -> int:
    try:
        sock = socket.socket(fileno=int(os.environ.pop(CONTROL_FD_VARIABLE)))
        supervisor_pid = int(os.environ.pop(SUPERVISOR_PID_VARIABLE))
    except (KeyError, ValueError, OSError) as exc:
        print(f"cogworker fork server: run by cogworker-swarm only ({exc})", file=sys.stderr)
        return exitcodes.USAGE
    die_with_parent()
    if os.getppid() != supervisor_pid:
        return exitcodes.FAILURE  # the supervisor died before PDEATHSIG was armed
    warm_up()  # while the settings check still runs beside this process (warm_up.py says why)
    settings = check.result()
    if isinstance(settings, int):  # 78 for a bad setting: the supervisor exits with the same code
        return settings
    # Before anything forks: the requeues done here and every child use this deployment's keys.
    shards.use_settings(settings)
    logs.configure(settings.log_level, settings.log_format, settings.log_levels, role="forkserver")
    setproctitle(TITLE)
    app_loaded = False
    if settings.preload:
        try:
            import_app(settings.require_modules)
        except BootError as exc:
            log.error("boot_failed", error=str(exc))
            print(f"cogworker-swarm: {exc}", file=sys.stderr)
            return exitcodes.BOOT_ERROR
        app_loaded = True
    # Keep what is imported by now (the app too, when preloaded) out of the collector's reach: a
    # collection in a child touching those objects would copy every page they live on (copy-on-write).
    # Collected first only when an app was loaded, which may leave real garbage behind: our own imports
    # leave a few dozen objects, and a full collection of them held every start back by 20-35 ms.
    if app_loaded:
        gc.collect()
    gc.freeze()
    gc.enable()  # main.py turned it off for the imports; the workers forked from here inherit this
    server = ForkServer(settings, sock, supervisor_pid, app_loaded)
    dumped = values_of(settings, reveal=False)
    # Secrets go as stars; the supervisor's metrics scrape needs the sentinels' password itself.
    dumped["redis_sentinel_password"] = settings.redis_sentinel_password.get_secret_value()
    send(sock, {"op": "ready", "settings": dumped})
    log.info("forkserver_ready", preload=app_loaded)
    return server.serve()
