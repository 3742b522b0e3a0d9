"""The supervisor while its first fork server loads the app (supervisor/main.py, await_forkserver):
a stop signal then ends the swarm cleanly without forking anything, and a fork server that dies with
an unexpected code is reported and fails the swarm."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner

pytestmark = pytest.mark.slow

# Imported by the fork server (preload): says it started, then waits for the test's release file.
SLOW_APP = """
import pathlib, time
here = pathlib.Path(__file__).parent
(here / "importing").touch()
deadline = time.monotonic() + 60
while not (here / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
"""

DYING_APP = "import os\nos._exit(9)\n"


def _start_preloading(swarms: SwarmRunner, app_dir: Path, module: str) -> Swarm:
    path = os.pathsep.join(p for p in (str(app_dir), os.environ.get("PYTHONPATH", "")) if p)
    return swarms.start(PYTHONPATH=path, COGWORKER_REQUIRE=module, COGWORKER_PRELOAD="true")


def test_a_stop_signal_while_the_app_loads_exits_ok_and_forks_nothing(
    swarms: SwarmRunner, tmp_path: Path
) -> None:
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "slow_boot_app.py").write_text(SLOW_APP)
    swarm = _start_preloading(swarms, app_dir, "slow_boot_app")
    try:
        wait_until(lambda: (app_dir / "importing").exists(), message="the fork server imports the app")
        swarm.signal(signal.SIGTERM)
        assert swarm.wait() == exitcodes.OK
    finally:
        (app_dir / "release").touch()
    assert swarm.supervisor_events("child_started") == []


def test_a_fork_server_dying_with_an_unexpected_code_fails_the_swarm(
    swarms: SwarmRunner, tmp_path: Path
) -> None:
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "dying_boot_app.py").write_text(DYING_APP)
    swarm = _start_preloading(swarms, app_dir, "dying_boot_app")
    assert swarm.wait() == exitcodes.FAILURE
    assert "the fork server exited 9 before it was ready" in swarm.log_path.read_text()
    assert swarm.supervisor_events("child_started") == []
