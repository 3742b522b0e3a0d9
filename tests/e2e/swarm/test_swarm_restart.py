"""Restarts (HUP/USR2) and memory restarts: new code from disk, capacity kept, failures contained."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psutil
import pytest
import redis

from cogworker import codec, exitcodes
from cogworker.api import payload
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner

pytestmark = pytest.mark.slow

APP = "swarm_version"


def write_app(directory: Path, version: str, *, broken: bool = False) -> None:
    """The app a deploy rewrites on disk. Each version has a different length, so Python's cached
    bytecode (keyed on source size and mtime) can't be mistaken for the new source."""
    crash = "raise RuntimeError('this deploy is broken')\n" if broken else ""
    (directory / f"{APP}.py").write_text(
        "import os\n\nimport redis\n\nfrom cogworker import job\n\n"
        f"VERSION = {version!r}\n{crash}\n\n"
        "@job\ndef whoami(tag: str) -> None:\n"
        "    client = redis.Redis.from_url(os.environ['COGWORKER_REDIS_URL'], decode_responses=True)\n"
        "    client.rpush('test:ran', f'{tag} {VERSION} {os.getpid()}')\n"
    )


# Each child forks from a fork server that imported the app (preload), or imports it itself (fork).
BOTH_START_MODES = pytest.mark.parametrize("preload", [False, True], ids=["fork", "preload"])


def start_versioned_app(swarms: SwarmRunner, tmp_path: Path, **env: str) -> tuple[Path, Swarm]:
    """A swarm running v1 of the app from a directory of its own, which a test rewrites to deploy."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    write_app(app_dir, "v1")
    pythonpath = f"{app_dir}{os.pathsep}{os.environ['PYTHONPATH']}"
    return app_dir, swarms.start(COGWORKER_REQUIRE=APP, PYTHONPATH=pythonpath, **env)


def push(r: redis.Redis, name: str, *args: object) -> None:
    job = payload.build(name, args, {}, queue="default", retry=False)
    r.lpush("cogworker:queue:default", codec.dumps(job))
    r.sadd("cogworker:queues", "default")


def run_whoami(r: redis.Redis, tag: str) -> str:
    """Run one whoami job; returns the version that ran it."""
    push(r, f"{APP}.whoami", tag)
    line = wait_until(
        lambda: next((x for x in r.lrange("test:ran", 0, -1) if x.split()[0] == tag), None),
        message=f"job {tag} to run",
    )
    return str(line.split()[1])


class PresenceFloor:
    """Polls how many children are present in Redis (heartbeat registry) while a restart runs."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.lowest: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PresenceFloor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            count = self.r.scard("cogworker:processes")
            self.lowest = count if self.lowest is None else min(self.lowest, count)


def capacity_after_first_ready(swarm: Swarm, count: int) -> list[int]:
    """Ready capacity from every capacity line after the swarm was first fully ready, up to a stop."""
    lines = swarm.supervisor_events("swarm_capacity")
    first = next(i for i, e in enumerate(lines) if e["ready"] == count)
    return [e["ready"] for e in lines[first:] if e["state"] != "stopping"]


@BOTH_START_MODES
def test_phased_restart_loads_new_code_and_keeps_ready_capacity(
    swarms: SwarmRunner, r: redis.Redis, tmp_path: Path, preload: bool
) -> None:
    app_dir, swarm = start_versioned_app(
        swarms, tmp_path, COGWORKER_PRELOAD=str(preload).lower(), COGWORKER_COUNT="3"
    )
    swarm.wait_ready()
    old = {c.pid for c in swarm.children()}
    old_forkservers = {p.pid for p in swarm.forkservers()}
    assert run_whoami(r, "before") == "v1"

    write_app(app_dir, "v2-deployed")
    with PresenceFloor(r) as floor:
        swarm.signal(signal.SIGHUP)
        swarm.wait_event("restart_finished")
        swarm.wait_ready()
        wait_until(lambda: not old & {c.pid for c in swarm.children()}, message="every old child gone")
    assert floor.lowest is not None and floor.lowest >= 3

    assert psutil.Process(swarm.pid).is_running()  # same supervisor process
    assert len(swarm.children()) == 3
    assert min(capacity_after_first_ready(swarm, 3)) == 3
    replaced = swarm.supervisor_events("child_replaced")
    assert len(replaced) == 3 and {e["old_pid"] for e in replaced} == old
    assert {e["reason"] for e in replaced} == {"restart"}
    assert [run_whoami(r, f"after{i}") for i in range(3)] == ["v2-deployed"] * 3
    # The code was loaded by a new fork server; the old one exited once it was replaced.
    assert len(swarm.supervisor_events("restart_loading")) == 1
    assert [e["forkserver_pid"] for e in swarm.wait_event("forkserver_retired")] == list(old_forkservers)
    assert len(swarm.forkservers()) == 1 and not old_forkservers & {p.pid for p in swarm.forkservers()}
    assert swarm.stop() == exitcodes.OK


@BOTH_START_MODES
def test_a_replacement_that_fails_to_boot_leaves_the_old_children_running(
    swarms: SwarmRunner, r: redis.Redis, tmp_path: Path, preload: bool
) -> None:
    app_dir, swarm = start_versioned_app(swarms, tmp_path, COGWORKER_PRELOAD=str(preload).lower())
    swarm.wait_ready()
    old = {c.pid for c in swarm.children()}
    old_forkservers = {p.pid for p in swarm.forkservers()}

    write_app(app_dir, "v2-broken", broken=True)
    swarm.signal(signal.SIGHUP)
    failed = swarm.wait_event("restart_failed")
    assert swarm.proc.poll() is None  # the swarm keeps running
    if preload:  # the new fork server can't import the app: it exits, and the old one stays
        assert "the new fork server exited 3" in failed[0]["reason"]
        assert "this deploy is broken" in swarm.log_path.read_text()
    else:
        assert "this deploy is broken" in failed[0]["reason"]
        swarm.wait_event("child_exited", reason="boot_error")
    assert {c.pid for c in swarm.children()} == old
    if preload:
        assert {p.pid for p in swarm.forkservers()} == old_forkservers
    else:  # the new fork server loaded (the app is imported in each child): it replaced the old one
        wait_until(
            lambda: (
                len(swarm.forkservers()) == 1 and not {p.pid for p in swarm.forkservers()} & old_forkservers
            )
        )
    swarm.wait_ready()
    assert run_whoami(r, "still") == "v1"
    assert swarm.supervisor_events("swarm_halting_boot_error") == []
    assert swarm.stop() == exitcodes.OK


def test_a_replacement_not_ready_in_time_is_given_up_and_the_old_child_kept(
    swarms: SwarmRunner, r: redis.Redis, tmp_path: Path
) -> None:
    app_dir, swarm = start_versioned_app(
        swarms,
        tmp_path,
        COGWORKER_COUNT="1",
        COGWORKER_RESTART_READY_TIMEOUT_S="1",
        COGWORKER_TIMEOUT_S="1",
        COGWORKER_GRACEFUL_STOP_TIMEOUT_S="2.5",
    )
    swarm.wait_ready()
    old = {c.pid for c in swarm.children()}
    (app_dir / f"{APP}.py").write_text("import time\n\ntime.sleep(60)  # an import that never ends\n")
    swarm.signal(signal.SIGHUP)
    failed = swarm.wait_event("replacement_failed")[0]
    assert failed["reason"] == "not ready within 1.0s" and failed["old_pid"] in old
    swarm.wait_event("restart_failed")
    # Told to stop, it can't (still importing): killed at the graceful deadline.
    assert swarm.wait_event("child_exited", child_pid=failed["child_pid"])[0]["reason"] == "straggler"
    assert {c.pid for c in swarm.children()} == old
    assert run_whoami(r, "kept") == "v1"
    assert swarm.stop() == exitcodes.OK


def test_restart_all_at_once_when_not_phased(swarms: SwarmRunner, r: redis.Redis, tmp_path: Path) -> None:
    app_dir, swarm = start_versioned_app(
        swarms,
        tmp_path,
        COGWORKER_PHASED_RESTART="false",
    )
    swarm.wait_ready()
    old = {c.pid for c in swarm.children()}
    write_app(app_dir, "v2-deployed")
    swarm.signal(signal.SIGUSR2)
    swarm.wait_event("restart_finished")
    swarm.wait_ready()
    assert not old & {c.pid for c in swarm.children()}
    exits = swarm.supervisor_events("child_exited")
    assert {e["child_pid"] for e in exits} == old and {e["reason"] for e in exits} == {"restart"}
    assert swarm.supervisor_events("respawn_scheduled") == []  # a restart is no crash
    assert run_whoami(r, "after") == "v2-deployed"
    assert swarm.stop() == exitcodes.OK


def test_a_child_over_the_memory_limit_is_replaced_gracefully(swarms: SwarmRunner, r: redis.Redis) -> None:
    swarm = swarms.start(
        COGWORKER_REQUIRE="demo_jobs,swarm_hog",
        COGWORKER_MAXMEM_MB="100",
        COGWORKER_MEMORY_CHECK_INTERVAL_S="0.2",
    )
    swarm.wait_ready()
    push(r, "swarm_hog.hog", "fat", 120)
    fat = int(wait_until(lambda: r.lrange("test:ran", 0, -1), message="the hog to run")[0].split()[1])

    over = swarm.wait_event("child_over_memory_limit", child_pid=fat)[0]
    assert over["rss_mb"] > 100 and over["limit_mb"] == 100
    replaced = swarm.wait_event("child_replaced", reason="memory")[0]
    assert replaced["old_pid"] == fat and replaced["slot"] == over["slot"]
    exited = swarm.wait_event("child_exited", child_pid=fat)[0]
    assert exited["reason"] == "memory" and not exited["requeue"]
    swarm.wait_ready()
    assert min(capacity_after_first_ready(swarm, 2)) == 2  # the replacement was ready first
    assert len(swarm.supervisor_events("child_over_memory_limit")) == 1
    assert swarm.stop() == exitcodes.OK
