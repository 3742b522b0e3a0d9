"""The swarm end to end: start, run jobs, stop; --help; config and boot errors; a killed supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis

from cogworker import exitcodes
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


def test_help_documents_signals_variables_and_exit_codes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.main", "--help"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0
    for text in ("TERM, INT", "USR1, TSTP", "HUP, USR2", "TTIN", "COUNT", "PRELOAD", "MAXMEM_MB"):
        assert text in out.stdout
    for name, code in (("OK", 0), ("FAILURE", 1), ("BOOT_ERROR", 3), ("CONFIG_ERROR", 78)):
        assert f"{code}" in out.stdout and name in out.stdout
    # It points to what a user has (the example environment file), not to a design file they can't open.
    assert "DESIGN" not in out.stdout and "cogworker.env.example" in out.stdout


def test_forks_n_children_that_run_jobs_and_stop_cleanly(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    import demo_jobs

    script = Path(sys.executable).parent / "cogworker-swarm"  # the installed console script
    swarm = swarms.start(COGWORKER_COUNT="3", command=[str(script)])
    swarm.wait_ready()
    children = swarm.children()
    assert len(children) == 3
    assert {c.ppid() for c in children} == {swarm.pid}
    # Process titles: role, slot, busy/threads.
    wait_until(
        lambda: "cogworker-swarm [3 children, 3 ready]" in " ".join(psutil.Process(swarm.pid).cmdline())
    )
    titles = sorted(" ".join(c.cmdline()) for c in children)
    assert [t.split(" busy")[0] for t in titles] == [f"cogworker worker [slot {i}] 0/2" for i in range(3)]
    identities = set(swarm.identities().values())
    assert {f"{os.uname().nodename}:{pid}" for pid in swarm.identities()} == {
        i.rsplit(":", 1)[0] for i in identities
    }

    for i in range(12):
        demo_jobs.record.perform_async(f"j{i}")
    wait_until(lambda: r.llen("test:ran") == 12, message="12 jobs")
    pids = {line.split()[1] for line in r.lrange("test:ran", 0, -1)}
    assert pids <= {str(c.pid) for c in children}

    assert swarm.stop() == exitcodes.OK
    exits = swarm.supervisor_events("child_exited")
    assert len(exits) == 3 and all(e["reason"] == "stop" and e["exit_code"] == 0 for e in exits)
    assert r.keys("cogworker:inprogress:*") == []
    assert r.scard("cogworker:processes") == 0


def test_children_never_inherit_systemds_notify_variables(swarms: SwarmRunner, r: redis.Redis) -> None:
    import json

    from cogworker import codec
    from cogworker.api import payload

    names = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "COGWORKER_COUNT"]
    swarm = swarms.start(
        COGWORKER_REQUIRE="swarm_env",
        NOTIFY_SOCKET="/nonexistent/notify.sock",
        WATCHDOG_USEC="30000000",
        WATCHDOG_PID="1",
    )
    swarm.wait_ready()
    for slot in range(2):
        job = payload.build("swarm_env.environment", (f"e{slot}", names), {}, queue="default", retry=False)
        r.lpush("cogworker:queue:default", codec.dumps(job))
    seen = wait_until(lambda: r.llen("test:env") == 2 and r.lrange("test:env", 0, -1), message="both jobs")
    for line in seen:
        env = json.loads(line)
        assert env["pid"] in set(swarm.current_children().values())
        assert env["NOTIFY_SOCKET"] is None and env["WATCHDOG_USEC"] is None and env["WATCHDOG_PID"] is None
        assert env["COGWORKER_COUNT"] == "2"  # the rest of the environment is inherited
    assert swarm.stop() == exitcodes.OK


def test_int_stops_like_term(swarms: SwarmRunner) -> None:
    swarm = swarms.start()
    swarm.wait_ready()
    swarm.signal(signal.SIGINT)
    assert swarm.wait() == exitcodes.OK


def test_term_while_children_are_still_forking_stops_cleanly(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_COUNT="3")
    swarm.wait_event("child_started")
    swarm.signal(signal.SIGTERM)
    assert swarm.wait() == exitcodes.OK
    assert len(swarm.supervisor_events("child_exited")) == len(swarm.supervisor_events("child_started"))


def test_config_error_exits_78_before_forking(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_CONCURRENCY="0")
    assert swarm.wait() == exitcodes.CONFIG_ERROR
    text = swarm.log_path.read_text()
    assert "configuration error: COGWORKER_CONCURRENCY=" in text
    assert swarm.supervisor_events("child_started") == []


def test_boot_error_halts_with_exit_3_instead_of_respawning(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_REQUIRE="demo_jobs,no_such_module_for_tests")
    assert swarm.wait() == exitcodes.BOOT_ERROR
    assert len(swarm.supervisor_events("child_started")) == 2
    assert swarm.supervisor_events("respawn_scheduled") == []
    halted = swarm.supervisor_events("swarm_halting_boot_error")
    assert len(halted) == 1 and "no_such_module_for_tests" in halted[0]["error"]
    assert "can't import 'no_such_module_for_tests'" in swarm.log_path.read_text()


def test_boot_error_with_preload_exits_3_and_forks_nothing(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_REQUIRE="no_such_module_for_tests", COGWORKER_PRELOAD="true")
    assert swarm.wait() == exitcodes.BOOT_ERROR
    assert swarm.supervisor_events("child_started") == []
    assert "can't import 'no_such_module_for_tests'" in swarm.log_path.read_text()


def test_preload_children_run_jobs(swarms: SwarmRunner, r: redis.Redis, configured) -> None:
    import demo_jobs

    swarm = swarms.start(COGWORKER_PRELOAD="true")
    swarm.wait_ready()
    demo_jobs.record.perform_async("p")
    wait_until(lambda: r.llen("test:ran") == 1)
    assert swarm.stop() == exitcodes.OK


def test_sigkilled_supervisor_leaves_no_child_running(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_COUNT="3")
    swarm.wait_ready()
    pids = [c.pid for c in swarm.children()] + [p.pid for p in swarm.forkservers()]
    assert len(pids) == 4  # three workers and the fork server
    swarm.signal(signal.SIGKILL)
    assert swarm.wait() == -signal.SIGKILL

    def all_gone() -> bool:
        swarm.reap_orphans()
        return not any(psutil.pid_exists(pid) for pid in pids)

    wait_until(all_gone, timeout=5, message="every child to die with its supervisor (PDEATHSIG)")


def loaded_files(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_supervisor_loads_no_redis_client_pydantic_or_app_only_its_forkserver_does(
    swarms: SwarmRunner, r: redis.Redis, configured
) -> None:
    # The supervisor stays small because the heavy parts live in the fork server the workers are
    # forked from: hiredis is mapped there (and in workers), not in it. pydantic's compiled core is in
    # none of them: only the settings check, a child of the fork server that has exited by `ready`,
    # loads it (settings_check.py), and the workers hold the checked values without it.
    import demo_jobs

    swarm = swarms.start(COGWORKER_PRELOAD="true")
    swarm.wait_ready()
    [forkserver] = swarm.forkservers()
    supervisor_maps, forkserver_maps = loaded_files(swarm.pid), loaded_files(forkserver.pid)
    assert "hiredis" in forkserver_maps
    assert "hiredis" not in supervisor_maps
    workers = swarm.children()
    for pid, maps in [(swarm.pid, supervisor_maps), (forkserver.pid, forkserver_maps)] + [
        (c.pid, loaded_files(c.pid)) for c in workers
    ]:
        assert "_pydantic_core" not in maps, pid
    # The fork server's settings check has exited and been reaped (so have the workers' intermediates).
    assert forkserver.children() == []
    # The workers are the supervisor's children all the same, and run jobs.
    assert {c.ppid() for c in workers} == {swarm.pid}
    demo_jobs.record.perform_async("via-forkserver")
    wait_until(lambda: r.llen("test:ran") == 1)
    assert swarm.stop() == exitcodes.OK


def test_ttin_makes_every_child_log_its_threads(swarms: SwarmRunner) -> None:
    swarm = swarms.start()
    swarm.wait_ready()
    swarm.signal(signal.SIGTTIN)
    pids = set(swarm.current_children().values())
    wait_until(
        lambda: {e["pid"] for e in swarm.events("thread_stack")} >= pids, message="stacks from each child"
    )
    assert swarm.stop() == exitcodes.OK


def test_redis_down_at_boot_is_no_crash(
    swarms: SwarmRunner, private_redis: RedisServer, tmp_path: Path
) -> None:
    private_redis.stop()
    swarm = swarms.start(redis_url=private_redis.url)
    swarm.wait_event("child_booted", count=2)
    # Children wait and report it; nothing exits, nothing is respawned, nobody is ready.
    wait_until(
        lambda: len(swarm.events("redis_outage_started")) >= 2, message="children to report the outage"
    )
    assert swarm.supervisor_events("child_exited") == []
    assert swarm.supervisor_events("swarm_capacity")[-1]["ready"] == 0
    private_redis.start()
    swarm.wait_ready(timeout=20)
    client = private_redis.client()
    assert client.scard("cogworker:processes") == 2
    client.close()
    assert swarm.stop() == exitcodes.OK
    assert swarm.supervisor_events("child_exited", reason="stop") and not swarm.supervisor_events(
        "respawn_scheduled"
    )
