"""The shipped cogworker@.service and cogworker.target running the real swarm under a real
systemd 252 user manager, driven with the systemctl commands deploy/RUNBOOK.md gives the person on call.

One manager serves the whole module (start-up is the slow part); each test starts the instances it
needs, and a per-test teardown stops them all and fails on any process left in their cgroups. The
units are the shipped files byte for byte, plus a drop-in that changes only what a test must: the
program (this checkout's venv), where the env files are, the user (no `cogworker` user here), and
the interpreter made visible under ProtectHome= (see tests/e2e/systemd/test_unit_files.py). The watchdog test
adds an instance drop-in of its own with a short WatchdogSec=.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from cogworker import codec
from tests.support import metrics
from tests.support.paths import APP_DIR, ROOT
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.swarm import FAST_ENV, is_forkserver, live_title
from tests.support.systemd_manager import UserManager, user_manager
from tests.support.units import SERVICE, TARGET, expose_interpreter

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

SWARM = Path(sys.executable).parent / "cogworker-swarm"  # this checkout's venv, not /opt/cogworker

APP = "cogworker@app.service"
MAILERS = "cogworker@mailers.service"
WATCHED = "cogworker@watched.service"
INSTANCES = ("app", "mailers", "watched")
APP_METRICS_PORT = free_port()  # the app instance serves metrics, under the unit's sandbox

# Short deadlines, so a drain takes seconds: the shipped TimeoutStopSec=45 stays far above them.
TIMEOUT_S = 2
GRACEFUL_STOP_TIMEOUT_S = 6
TIMEOUT_STOP_S = 45  # the unit's own TimeoutStopSec=


def env_file_text(redis_url: str, **extra: str) -> str:
    settings = {
        **FAST_ENV,
        "COGWORKER_REDIS_URL": redis_url,
        "COGWORKER_TIMEOUT_S": str(TIMEOUT_S),
        "COGWORKER_GRACEFUL_STOP_TIMEOUT_S": str(GRACEFUL_STOP_TIMEOUT_S),
        "PYTHONPATH": f"{APP_DIR}{os.pathsep}{ROOT}",
        **extra,
    }
    return "# written by tests/e2e/systemd/test_systemd_swarm.py\n" + "".join(
        f"{k}={v}\n" for k, v in settings.items()
    )


def enable_client_side(manager: UserManager) -> None:
    """Make `systemctl --user enable` work against this manager.

    systemctl installs unit files itself (client side), into $XDG_CONFIG_HOME/systemd/user, looking
    units up on SYSTEMD_UNIT_PATH: point both at what the manager reads, its units directory.
    """
    config = manager.dir / "home" / ".config" / "systemd"
    config.mkdir(parents=True, exist_ok=True)
    (config / "user").symlink_to(manager.units_dir)
    manager.env["XDG_CONFIG_HOME"] = str(manager.dir / "home" / ".config")
    manager.env["SYSTEMD_UNIT_PATH"] = f"{manager.units_dir}:/usr/lib/systemd/user"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[UserManager]:
    with user_manager(tmp_path_factory.mktemp("systemd-swarm")) as made:
        shutil.copy(SERVICE, made.units_dir / SERVICE.name)
        shutil.copy(TARGET, made.units_dir / TARGET.name)
        for instance in INSTANCES:
            extra = {"COGWORKER_QUEUES": "mailers"} if instance == "mailers" else {}
            if instance == "app":
                extra = {
                    "COGWORKER_METRICS_PORT": str(APP_METRICS_PORT),
                    "COGWORKER_METRICS_HOST": "127.0.0.1",
                }
            (made.dir / f"{instance}.env").write_text(env_file_text(redis_server.url, **extra))
        dropin = made.units_dir / "cogworker@.service.d"
        dropin.mkdir()
        (dropin / "test.conf").write_text(
            "[Service]\n"
            "ExecStart=\n"
            f"ExecStart={SWARM}\n"
            "EnvironmentFile=\n"
            f"EnvironmentFile={made.dir}/%i.env\n"
            "User=root\n"
            "Group=root\n" + expose_interpreter()
        )
        # One instance with a watchdog short enough to test: 2 s of silence, restarted after 1 s,
        # and no core file from the SIGABRT systemd sends first.
        watched = made.units_dir / f"{WATCHED}.d"
        watched.mkdir()
        (watched / "watchdog.conf").write_text("[Service]\nWatchdogSec=2\nRestartSec=1\nLimitCORE=0\n")
        enable_client_side(made)
        made.systemctl("daemon-reload", check=True)
        yield made


def unit_processes(manager: UserManager) -> list[psutil.Process]:
    """Live processes in any cogworker unit's cgroup of this manager."""
    found = []
    for proc in psutil.process_iter():
        try:
            text = Path(f"/proc/{proc.pid}/cgroup").read_text()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue
        if any(f"/{manager.cgroup_name}/" in line and "/cogworker@" in line for line in text.splitlines()):
            found.append(proc)
    return found


@pytest.fixture
def sd(manager: UserManager, r: redis.Redis) -> Iterator[UserManager]:
    """The module's manager, with every cogworker unit stopped (and checked empty) after the test."""
    yield manager
    enabled = [u for u in (APP, MAILERS) if (manager.units_dir / "cogworker.target.wants" / u).is_symlink()]
    if enabled:
        manager.systemctl("disable", *enabled, check=True)
        manager.systemctl("daemon-reload", check=True)  # offline install: see the enable test
    manager.systemctl("stop", "cogworker.target", "cogworker@*.service", check=True, timeout=60)
    manager.systemctl("reset-failed", "cogworker@*.service")
    wait_until(lambda: not unit_processes(manager), timeout=5, message="no process left in a cogworker unit")


def main_pid(manager: UserManager, unit: str = APP) -> int:
    return int(manager.show(unit, "MainPID")["MainPID"])


def children(pid: int) -> set[int]:
    """Live worker children (not the fork server); one may exit between being listed and being
    looked at (a restart is retiring it)."""
    live = set()
    for child in psutil.Process(pid).children():
        title = live_title(child)
        if title is not None and not is_forkserver(title):
            live.add(child.pid)
    return live


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def status_text(manager: UserManager, unit: str = APP) -> str:
    return manager.show(unit, "StatusText")["StatusText"]


def start(manager: UserManager, unit: str = APP) -> int:
    """`systemctl start` returns once the swarm sent READY=1: every child is ready."""
    manager.systemctl("start", unit, check=True)
    state = manager.show(unit, "ActiveState", "StatusText", "MainPID")
    assert state["ActiveState"] == "active", state
    assert state["StatusText"].startswith("running: 2/2 ready, 0/4 busy"), state
    assert state["StatusText"].endswith("redis up"), state
    return int(state["MainPID"])


def started(r: redis.Redis, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in r.lrange("test:started", 0, -1) if line.split()[0] == tag]


def ran(r: redis.Redis, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in r.lrange("test:ran", 0, -1) if line.split()[0] == tag]


def log_events(manager: UserManager, name: str) -> list[dict[str, Any]]:
    """The swarms' JSON log lines (their stdout and stderr land in the manager's log)."""
    events = []
    for line in manager.log_text().splitlines():
        if not line.startswith("{"):
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("event") == name:
            events.append(item)
    return events


def test_start_status_show_reload_and_restart(sd: UserManager, r: redis.Redis, configured: object) -> None:
    import demo_jobs

    pid = start(sd)
    kids = children(pid)
    assert len(kids) == 2

    status = sd.systemctl("status", APP)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Active: active (running)" in status.stdout
    assert 'Status: "running: 2/2 ready' in status.stdout
    assert f"Main PID: {pid}" in status.stdout
    tree = [line for line in status.stdout.splitlines() if "cogworker worker [slot" in line]
    assert {int(line.split("─", 1)[1].split()[0]) for line in tree} == kids  # the cgroup tree

    # The runbook's own line.
    shown = sd.systemctl(
        "show", "-p", "StatusText", "-p", "ActiveState", "-p", "MainPID", "-p", "NRestarts", APP, check=True
    )
    props = dict(line.split("=", 1) for line in shown.stdout.splitlines())
    assert props["ActiveState"] == "active" and props["MainPID"] == str(pid) and props["NRestarts"] == "0"
    assert props["StatusText"].startswith("running: 2/2 ready")

    # Rolling restart: same supervisor, new children, running again.
    sd.systemctl("reload", APP, check=True)
    wait_until(
        lambda: not children(pid) & kids and len(children(pid)) == 2,
        timeout=20,
        message="every child replaced",
    )
    wait_until(lambda: status_text(sd).startswith("running: 2/2 ready"), message="StatusText running again")
    assert sd.show(APP, "ActiveState", "MainPID") == {"ActiveState": "active", "MainPID": str(pid)}
    assert len([e for e in log_events(sd, "restart_finished") if e["pid"] == pid]) == 1
    demo_jobs.record.perform_async("after-reload")
    wait_until(lambda: ran(r, "after-reload"), message="a job run by a new child")
    assert ran(r, "after-reload")[0] in children(pid)

    # A full restart: a new supervisor.
    sd.systemctl("restart", APP, check=True)
    state = sd.show(APP, "ActiveState", "StatusText", "MainPID", "NRestarts")
    assert state["ActiveState"] == "active" and int(state["MainPID"]) not in (0, pid)
    assert state["StatusText"].startswith("running: 2/2 ready")
    assert state["NRestarts"] == "0"  # asked for, not an automatic restart
    assert not alive(pid)


def test_a_child_killed_mid_job_is_the_swarms_business(
    sd: UserManager, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    pid = start(sd)
    demo_jobs.sleepy.perform_async("victim", 1.0)
    victim = wait_until(lambda: started(r, "victim"), message="the job to start")[0]
    assert victim in children(pid)
    os.kill(victim, signal.SIGKILL)

    wait_until(lambda: len(started(r, "victim")) == 2, message="the job to run again")
    wait_until(lambda: ran(r, "victim"), message="the requeued job to finish")
    assert ran(r, "victim") == [started(r, "victim")[1]] and ran(r, "victim") != [victim]
    wait_until(lambda: status_text(sd).startswith("running: 2/2 ready"), message="the slot respawned")
    state = sd.show(APP, "ActiveState", "MainPID", "NRestarts")
    assert state == {"ActiveState": "active", "MainPID": str(pid), "NRestarts": "0"}
    assert victim not in children(pid) and len(children(pid)) == 2
    # Acknowledged (its in-progress entry removed) once it returned; nothing else is in progress.
    wait_until(lambda: not r.keys("cogworker:inprogress:*"), message="no job left in progress")


def test_a_silent_supervisor_is_restarted_by_the_watchdog(sd: UserManager) -> None:
    pid = start(sd, WATCHED)
    old_children = children(pid)
    assert sd.show(WATCHED, "NRestarts")["NRestarts"] == "0"
    os.kill(pid, signal.SIGSTOP)  # the loop stops: no more WATCHDOG=1

    # Caught in the RestartSec=1 pause, before the restart resets Result.
    failed = sd.wait_for(WATCHED, "Result", "watchdog", timeout=10)
    assert failed["SubState"] in ("auto-restart", "stop-watchdog", "final-sigterm", "final-sigkill")
    sd.wait_for(WATCHED, "NRestarts", "1", timeout=10)
    state = sd.wait_for(WATCHED, "ActiveState", "active", timeout=15)
    new_pid = main_pid(sd, WATCHED)
    assert new_pid not in (0, pid)
    wait_until(
        lambda: status_text(sd, WATCHED).startswith("running: 2/2 ready"), message="the new swarm ready"
    )
    assert state["Result"] == "success"
    assert f"{WATCHED}: Watchdog timeout" in sd.log_text()
    assert not any(alive(p) for p in old_children | {pid})


def test_stop_drains_within_the_timeout_and_loses_no_job(
    sd: UserManager, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    start(sd)
    short = [demo_jobs.sleepy.perform_async(f"short{i}", 1.0) for i in range(2)]
    long = [demo_jobs.sleepy.perform_async(f"long{i}", 60.0) for i in range(2)]
    wait_until(lambda: r.llen("test:started") == 4, message="four jobs running (2 children x 2 threads)")
    assert sd.show(APP, "NRestarts")["NRestarts"] == "0"

    began = time.monotonic()
    sd.systemctl("stop", APP, check=True, timeout=TIMEOUT_STOP_S + 15)
    took = time.monotonic() - began
    state = sd.show(APP, "ActiveState", "Result", "MainPID")
    assert state == {"ActiveState": "inactive", "Result": "success", "MainPID": "0"}, state
    assert took < TIMEOUT_STOP_S
    assert took < GRACEFUL_STOP_TIMEOUT_S  # the children's own drain deadline ended it, not a kill

    # The short jobs finished during the drain; the long ones were put back on their queue.
    assert sorted(ran(r, "short0") + ran(r, "short1")) == sorted(started(r, "short0") + started(r, "short1"))
    queued = [codec.loads_dict(raw) for raw in r.lrange("cogworker:queue:default", 0, -1)]
    assert sorted(j["jid"] for j in queued if j) == sorted(long)
    assert not ran(r, "long0") and not ran(r, "long1")
    assert r.keys("cogworker:inprogress:*") == []
    assert r.zcard("cogworker:dead") == 0 and r.zcard("cogworker:retry") == 0
    assert len(short) == 2


def quiet_flags(r: redis.Redis, pids: set[int]) -> dict[int, str | None]:
    """child pid -> the `quiet` field of its presence hash (written on every heartbeat)."""
    flags: dict[int, str | None] = {}
    for identity in r.smembers("cogworker:processes"):
        pid = int(str(identity).split(":")[1])
        if pid in pids:
            flags[pid] = r.hget(f"cogworker:process:{identity}", "quiet")
    return flags


def test_kill_main_with_usr1_quiets_and_with_ttin_dumps_stacks(sd: UserManager, r: redis.Redis) -> None:
    pid = start(sd)
    kids = children(pid)
    wait_until(lambda: quiet_flags(r, kids) == dict.fromkeys(kids, "0"), message="both children beating")

    sd.systemctl("kill", "-s", "USR1", "--kill-whom=main", APP, check=True)
    wait_until(lambda: quiet_flags(r, kids) == dict.fromkeys(kids, "1"), message="both children quiet")
    wait_until(lambda: status_text(sd).startswith("quiet: 2/2 ready"), message="StatusText quiet")
    assert children(pid) == kids  # relayed by the supervisor, not sent to the children by systemd

    sd.systemctl("kill", "-s", "TTIN", "--kill-whom=main", APP, check=True)
    wait_until(
        lambda: {e.get("pid") for e in log_events(sd, "thread_stack")} >= kids,
        message="thread_stack lines from every child",
    )
    assert sd.show(APP, "ActiveState", "MainPID") == {"ActiveState": "active", "MainPID": str(pid)}
    assert children(pid) == kids


def test_enable_now_and_the_target_start_and_stop_every_instance(
    sd: UserManager, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    start(sd)
    sd.systemctl("enable", "--now", MAILERS, check=True)
    # On a host booted with systemd, enable ends with a daemon-reload. This host isn't (no
    # /run/systemd/system outside the manager's namespace), so systemctl installs "offline" and
    # leaves the reload to us; without it the loaded target would not see its new Wants=.
    sd.systemctl("daemon-reload", check=True)
    assert sd.show(MAILERS, "ActiveState")["ActiveState"] == "active"
    assert MAILERS in sd.show("cogworker.target", "Wants")["Wants"].split()
    # The instance reads its own env file: COGWORKER_QUEUES=mailers.
    demo_jobs.record.set(queue="mailers").perform_async("mail")
    mailers_pid = main_pid(sd, MAILERS)
    wait_until(lambda: ran(r, "mail"), message="the mailers instance to run its queue's job")
    assert ran(r, "mail")[0] in children(mailers_pid)

    # PartOf= pulls in a stop job for each instance, the one started by hand too; the target's own
    # stop job waits for them (see the next test).
    sd.systemctl("stop", "cogworker.target", check=True, timeout=60)
    for unit in (APP, MAILERS):
        state = sd.wait_for(unit, "ActiveState", "inactive", timeout=TIMEOUT_STOP_S)
        assert state["Result"] == "success", state

    sd.systemctl("start", "cogworker.target", check=True)
    sd.wait_for(MAILERS, "ActiveState", "active")  # enabled: pulled in by the target
    assert sd.show(APP, "ActiveState")["ActiveState"] == "inactive"  # started by hand, never enabled
    sd.systemctl("stop", "cogworker.target", check=True, timeout=60)
    sd.wait_for(MAILERS, "ActiveState", "inactive", timeout=TIMEOUT_STOP_S)
    wait_until(lambda: not unit_processes(sd), timeout=5, message="no process left in either instance")


def test_stopping_the_target_returns_once_every_instance_has_drained(
    sd: UserManager, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    sd.systemctl("enable", APP, MAILERS, check=True)
    sd.systemctl("daemon-reload", check=True)  # offline install: see the enable test
    sd.systemctl("start", "cogworker.target", check=True)
    for unit in (APP, MAILERS):
        wait_until(
            lambda u=unit: status_text(sd, u).startswith("running: 2/2 ready"), message=f"{unit} ready"
        )
    # Jobs that outlast the target's own stop but finish within the swarms' drain (TIMEOUT_S).
    demo_jobs.sleepy.perform_async("app-job", 1.5)
    demo_jobs.sleepy.set(queue="mailers").perform_async("mail-job", 1.5)
    wait_until(lambda: started(r, "app-job") and started(r, "mail-job"), message="both jobs running")

    sd.systemctl("stop", "cogworker.target", check=True, timeout=TIMEOUT_STOP_S + 15)
    # Read before anything else can happen: a stop that returned early shows instances deactivating.
    states = {unit: sd.show(unit, "ActiveState", "Result", "MainPID") for unit in (APP, MAILERS)}
    drained = {"ActiveState": "inactive", "Result": "success", "MainPID": "0"}
    assert states == {APP: drained, MAILERS: drained}
    assert ran(r, "app-job") == started(r, "app-job")
    assert ran(r, "mail-job") == started(r, "mail-job")
    assert r.keys("cogworker:inprogress:*") == []
    assert not unit_processes(sd)
    # The instances' After=cogworker.target overrides the After= a target adds on what it wants; a
    # cycle between the two would make systemd drop jobs, and log it.
    assert "ordering cycle" not in sd.log_text()


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def test_the_swarm_runs_under_the_units_sandbox_within_its_tasks_max(
    sd: UserManager, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    pid = start(sd)
    processes = [
        p
        for p in unit_processes(sd)
        if APP.removesuffix(".service") in Path(f"/proc/{p.pid}/cgroup").read_text()
    ]
    assert pid in {p.pid for p in processes} and len(processes) >= 4  # supervisor, fork server, 2 children
    own_mounts = os.readlink("/proc/self/ns/mnt")
    for proc in processes:
        status = proc_status(proc.pid)
        # Mode 2 is a seccomp filter (SystemCallFilter=); NoNewPrivs comes with it.
        assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", (proc.pid, status)
        assert os.readlink(f"/proc/{proc.pid}/ns/mnt") != own_mounts  # PrivateMounts= and friends
    # The swarm did everything it needs under the filter: forked children that fetch and run a job,
    # and a metrics endpoint that serves it.
    demo_jobs.record.perform_async("filtered")
    wait_until(lambda: ran(r, "filtered"), message="a job run under the system call filter")
    assert ran(r, "filtered")[0] in children(pid)
    samples = metrics.parse(metrics.scrape_text(APP_METRICS_PORT))
    assert metrics.value(samples, "cogworker_redis_up") == 1
    assert metrics.value(samples, "cogworker_children", state="ready") == 2
    # The unit comment's TasksMax sizing, without the restart factor of 2, covers a running swarm.
    count, concurrency = int(FAST_ENV["COGWORKER_COUNT"]), int(FAST_ENV["COGWORKER_CONCURRENCY"])
    tasks = sum(p.num_threads() for p in processes)
    assert tasks <= count * (concurrency + 8) + 16, tasks
    assert sd.show(APP, "TasksMax")["TasksMax"] == "4096"
