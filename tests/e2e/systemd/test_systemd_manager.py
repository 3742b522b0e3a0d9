"""The systemd fixture works, and supervisor/integrations/notify.py speaks to a real systemd 252 manager."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.systemd_manager import exec_arg, user_manager

pytestmark = pytest.mark.systemd


# The service: tells systemd it is ready (with the watchdog interval systemd gave it), keeps the
# watchdog fed, and answers SIGHUP the way the swarm answers a reload.
SERVICE_CODE = """\
import signal, time
from supervisor.integrations.notify import Notifier

n = Notifier()
reloads = 0

def on_hup(signum, frame):
    global reloads
    reloads += 1
    n.reloading()
    n.ready(status=f"reloaded {reloads}")

signal.signal(signal.SIGHUP, on_hup)
n.ready(status=f"smoke ready, watchdog every {n.watchdog_interval_s()} s")
while True:
    n.watchdog()
    time.sleep(n.watchdog_interval_s() or 1.0)
"""


def _notify_unit() -> str:
    return (
        "[Unit]\n"
        "Description=cogworker notify smoke test\n"
        "[Service]\n"
        "Type=notify\n"
        "NotifyAccess=main\n"
        f"Environment=PYTHONPATH={ROOT}\n"
        f"ExecStart={sys.executable} -c {exec_arg(SERVICE_CODE)}\n"
        "ExecReload=/bin/kill -HUP $MAINPID\n"
        "WatchdogSec=5\n"
        "TimeoutStartSec=20\n"
    )


def test_notify_unit_starts_reports_status_and_stops(tmp_path: Path) -> None:
    with user_manager(tmp_path) as manager:
        manager.install_unit("cw-smoke.service", _notify_unit())
        # Type=notify: `start` returns only after READY=1 arrived (or fails).
        manager.systemctl("start", "cw-smoke.service", check=True)
        state = manager.show("cw-smoke.service", "ActiveState", "SubState", "StatusText", "MainPID")
        assert state["ActiveState"] == "active", manager.log_text()
        assert state["SubState"] == "running"
        # WatchdogSec=5 reaches the service as WATCHDOG_USEC, with WATCHDOG_PID = its own pid.
        assert state["StatusText"] == "smoke ready, watchdog every 2.5 s"
        assert int(state["MainPID"]) > 0

        manager.systemctl("stop", "cw-smoke.service", check=True)
        state = manager.wait_for("cw-smoke.service", "ActiveState", "inactive")
        assert state["Result"] == "success"


def test_reload_brackets_with_reloading_and_ready(tmp_path: Path) -> None:
    with user_manager(tmp_path) as manager:
        manager.install_unit("cw-reload.service", _notify_unit())
        manager.systemctl("start", "cw-reload.service", check=True)
        pid = manager.show("cw-reload.service", "MainPID")["MainPID"]

        manager.systemctl("reload", "cw-reload.service", check=True)
        state = manager.wait_for("cw-reload.service", "StatusText", "reloaded 1")
        assert state["ActiveState"] == "active"
        assert manager.show("cw-reload.service", "MainPID")["MainPID"] == pid
        # NotifyAccess=main accepted every message: systemd logs each one it refuses.
        assert "reception only permitted" not in manager.log_text()
