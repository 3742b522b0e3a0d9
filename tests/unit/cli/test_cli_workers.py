"""The verbs against real `cogworker run` processes: status, quiet/stop/resume, recover-orphans."""

from __future__ import annotations

import os
import signal

import pytest
import redis

from cogworker.settings import Settings
from tests.support.cli_runner import CLI, Workers, cli_fixture, workers_fixture  # noqa: F401
from tests.support.redis_server import wait_until


def quiet_flag(r: redis.Redis, identity: str) -> str | None:
    return r.hget(f"cogworker:process:{identity}", "quiet")


def test_quiet_resume_and_stop_reach_live_processes(cli: CLI, workers: Workers, r: redis.Redis) -> None:
    a, b = workers.start(), workers.start()
    id_a, id_b = workers.identity(a), workers.identity(b)

    data = cli("status", "--json").json()
    assert sorted(p["identity"] for p in data["processes"]) == sorted([id_a, id_b])
    assert {p["pid"] for p in data["processes"]} == {a.pid, b.pid}
    assert all(p["concurrency"] == 2 and not p["quiet"] for p in data["processes"])

    told = cli("quiet", "--identity", id_a)
    assert told.code == 0
    assert told.out.startswith(f"told {id_a} (") and f"pid {a.pid}) to quiet" in told.out
    wait_until(lambda: quiet_flag(r, id_a) == "1", timeout=10, message="a quiet")
    assert quiet_flag(r, id_b) == "0"
    assert "quiet" in cli("status").out

    import demo_jobs

    demo_jobs.record.perform_async("while-a-is-quiet")
    ran = wait_until(lambda: r.lrange("test:ran", 0, -1), timeout=10, message="the job to run")
    assert ran == [f"while-a-is-quiet {b.pid}"]  # only the process that is not quiet fetched it

    resumed = cli("resume", "--all", "--json").json()
    assert sorted(p["identity"] for p in resumed["told"]) == sorted([id_a, id_b])
    wait_until(lambda: quiet_flag(r, id_a) == "0", timeout=10, message="a resumed")

    assert cli("stop", "--identity", id_b).code == 0
    assert b.wait(timeout=15) == 0
    stopped = cli("stop", "--all", "--json").json()
    assert [p["identity"] for p in stopped["told"]] == [id_a]  # b is gone
    assert a.wait(timeout=15) == 0
    assert cli("status", "--json").json()["processes"] == []


def test_telling_a_process_that_is_not_live(cli: CLI, r: redis.Redis) -> None:
    out = cli("quiet", "--identity", "nohost:1:abc")
    assert out.code == 1
    assert out.err.strip() == "cogworker: no live process nohost:1:abc (see `cogworker status`)"
    assert r.exists("cogworker:signals:nohost:1:abc") == 0
    assert cli("quiet").code == 2  # --identity or --all is required
    assert cli("stop", "--all").out.strip() == "no live process to tell to stop"


def test_status_shows_running_jobs_and_recover_orphans_requeues_a_killed_workers_jobs(
    cli: CLI, workers: Workers, r: redis.Redis, configured: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import demo_jobs

    # Quick thresholds for the CLI; they must agree (heartbeat < presence TTL < orphan threshold).
    monkeypatch.setenv("COGWORKER_HEARTBEAT_INTERVAL_S", "0.2")
    monkeypatch.setenv("COGWORKER_PRESENCE_TTL_S", "1")
    monkeypatch.setenv("COGWORKER_ORPHAN_THRESHOLD_S", "1.5")
    proc = workers.start(COGWORKER_PRESENCE_TTL_S="1")
    identity = workers.identity(proc)
    jid = demo_jobs.sleepy.perform_async("long", 60)

    def running() -> list[dict[str, object]]:
        [process] = cli("status", "--json").json()["processes"]
        return list(process["running"])

    [job] = wait_until(running, timeout=10, message="the job in the work hash")
    assert (job["job"], job["jid"], job["args"], job["queue"]) == (
        "demo_jobs.sleepy",
        jid,
        ["long", 60],
        "default",
    )
    [process] = cli("status", "--json").json()["processes"]
    assert (process["busy"], process["in_progress"]) == (1, 1)
    text = cli("status").out
    assert "Running:" in text and "demo_jobs.sleepy" in text and jid in text

    assert cli("recover-orphans").out.strip() == "0 orphaned job(s) requeued"  # it is alive
    assert r.llen(f"cogworker:inprogress:{identity}") == 1

    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    workers.procs.remove(proc)
    wait_until(
        lambda: not r.exists(f"cogworker:process:{identity}"), timeout=10, message="presence to expire"
    )
    status = cli("status", "--json").json()
    assert status["processes"] == []
    assert [(o["identity"], o["size"]) for o in status["orphaned"]] == [(identity, 1)]

    wait_until(
        lambda: cli("recover-orphans", "--json").json()["requeued"] == 1,
        timeout=10,
        message="recovery once the owner is silent past the threshold",
    )
    assert r.llen(f"cogworker:inprogress:{identity}") == 0
    [requeued] = r.lrange("cogworker:queue:default", 0, -1)
    assert jid in requeued
    assert cli("status", "--json").json()["orphaned"] == []
