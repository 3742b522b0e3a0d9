"""The swarm's first fork server is a fork of the supervisor
(supervisor/forkserver_client/first_forkserver.py), a restart's is a new interpreter (`python -m`). Both
must look the same to an app and to the processes around them: the working directory is importable, and
nothing of the supervisor's is held open."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
import redis

from cogworker import codec, exitcodes
from cogworker.api import payload
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

SWARM = Path(sys.executable).parent / "cogworker-swarm"  # the console script, as a user starts it

APP = """\
import os
import sys

import redis

from cogworker import job


@job
def where(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:where", f"{tag} {os.getpid()} {sys.path[0]}")
"""


def run_where(r: redis.Redis, tag: str) -> tuple[int, str]:
    """Run one job of the app; the pid that ran it and the first entry of its sys.path."""
    job = payload.build("beside_app.where", (tag,), {}, queue="default", retry=False)
    r.lpush("cogworker:queue:default", codec.dumps(job))
    line = wait_until(
        lambda: next((x for x in r.lrange("test:where", 0, -1) if x.split()[0] == tag), None),
        message=f"job {tag} to run",
    )
    _, pid, first = line.split(" ", 2)
    return int(pid), first


@pytest.mark.parametrize("preload", ["false", "true"])
def test_an_app_in_the_working_directory_loads_before_and_after_a_restart(
    swarms: SwarmRunner, r: redis.Redis, tmp_path: Path, preload: str
) -> None:
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "beside_app.py").write_text(APP)
    swarm = swarms.start(
        command=[str(SWARM)],
        cwd=app_dir,
        COGWORKER_REQUIRE="beside_app",
        COGWORKER_PRELOAD=preload,
        COGWORKER_COUNT="1",
    )
    swarm.wait_ready()
    [first_child] = swarm.children()
    assert run_where(r, "first") == (first_child.pid, str(app_dir))

    swarm.signal(signal.SIGHUP)  # a new fork server, a new interpreter, loads the app again
    swarm.wait_event("restart_finished")
    wait_until(lambda: first_child.pid not in {c.pid for c in swarm.children()}, message="a new child")
    swarm.wait_ready()
    [second_child] = swarm.children()
    assert run_where(r, "second") == (second_child.pid, str(app_dir))
    assert swarm.stop() == exitcodes.OK


def open_files(pid: int) -> dict[int, str]:
    """fd -> what it is (`pipe:[inode]`, `socket:[inode]`, a path) for every descriptor of `pid`."""
    found: dict[int, str] = {}
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found[int(entry.name)] = os.readlink(entry)
        except FileNotFoundError:  # closed while listed
            continue
    return found


def test_the_first_fork_server_and_its_workers_hold_nothing_of_the_supervisors(
    swarms: SwarmRunner, r: redis.Redis
) -> None:
    swarm = swarms.start(command=[str(SWARM)], COGWORKER_REQUIRE="demo_jobs", COGWORKER_COUNT="2")
    swarm.wait_ready()
    [server] = swarm.forkservers()
    assert server.ppid() == swarm.pid
    supervisor_files = _beyond_stdio(swarm.pid)
    # The supervisor's signal pipe and its end of the control socket: the fork server must not hold
    # them (a handler of the supervisor's would write to a pipe nobody reads; the socket would never
    # see end of file).
    assert not _beyond_stdio(server.pid) & supervisor_files, _beyond_stdio(server.pid)
    for child in swarm.children():
        # A worker shares one pipe with the supervisor, its own state pipe, and nothing else of its.
        assert len(_beyond_stdio(child.pid) & supervisor_files) == 1
    # Signals stay the supervisor's: a TERM sent to the fork server itself is held back, not acted on.
    os.kill(server.pid, signal.SIGTERM)
    assert _blocked_and_pending(server, signal.SIGTERM)
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    assert swarm.stop() == exitcodes.OK


def _beyond_stdio(pid: int) -> set[str]:
    """What `pid` holds open past stdin, stdout and stderr (the log file both share)."""
    return {target for fd, target in open_files(pid).items() if fd > 2}


MASKS = ("SigBlk", "ShdPnd", "SigPnd")  # blocked; pending for the process; pending for its main thread


def _blocked_and_pending(process: psutil.Process, signum: int) -> bool:
    """Whether `signum` is in the process's blocked mask and, once sent, stays pending there."""
    bit = 1 << (signum - 1)

    def masks() -> dict[str, int]:
        lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
        fields = (line.partition(":") for line in lines)
        return {key: int(value.strip(), 16) for key, _, value in fields if key in MASKS}

    wait_until(lambda: masks()["ShdPnd"] & bit or masks()["SigPnd"] & bit, message="the signal pending")
    return bool(masks()["SigBlk"] & bit)
