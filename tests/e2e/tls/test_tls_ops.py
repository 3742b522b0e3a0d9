"""The rest of cogworker's command mix, as the ACL user over TLS: unique claims, job status, a periodic
entry, the scheduled/retry/dead set actions, pausing a queue, remote quiet and resume, orphan
recovery, `doctor --fix`, and every Web UI page. Each step checks its effect; the `admin` fixture then
fails the test on anything the server's ACL refused, so a command missing from the docs' list
shows up here even in a path that tolerates a refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.web import create_app
from tests.support.redis_server import wait_until
from tests.support.tls_redis import TlsRedis
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """A verb in a fresh interpreter, with this process's (TLS) COGWORKER_* environment."""
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", *argv],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def test_every_ops_path_works_as_the_acl_user(
    tls_redis: TlsRedis,
    admin: redis.Redis,
    workers: WorkerPool,
    tmp_path: Path,
    tls_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = tmp_path / "ticks.txt"
    out = tmp_path / "ran.txt"
    monkeypatch.setenv("COGWORKER_REQUIRE", "tls_jobs,tick_periodic")
    worker = workers.start(
        **{**tls_env, "COGWORKER_REQUIRE": "tls_jobs,tick_periodic"},
        COGWORKER_HEARTBEAT_INTERVAL_S="0.3",
        COGWORKER_POLL_INTERVAL_S="0.5",
        COGWORKER_PERIODIC_CHECK_INTERVAL_S="0.5",
        TICK_FILE=str(ticks),
    )
    identity = worker.identity()
    settings = load_settings()
    cw_client.configure(settings)
    import tls_jobs

    # A periodic entry fires (its slot claims and the enqueue are scripts under cogworker:*).
    wait_until(lambda: lines(ticks), timeout=15, message="a periodic tick")
    assert "tick_periodic.tick" in cli("periodic", "list", "--json").stdout

    # A unique job: the second push is refused while the first holds the claim; its status is kept.
    jid = tls_jobs.unique_note.perform_async(str(out), "u")
    assert jid is not None
    wait_until(lambda: cogworker.status(jid) == "complete", timeout=15, message="the unique job's status")
    assert [line.split()[0] for line in lines(out)] == ["unique-u"]

    # Pausing a queue holds its jobs; resuming lets them run.
    cli("queue", "pause", "default")
    paused_jid = tls_jobs.note.perform_async(str(out), "paused")
    assert json.loads(cli("queues", "--json").stdout)
    # (the periodic ticks wait there too)
    wait_until(
        lambda: any(str(paused_jid) in raw for raw in admin.lrange("cogworker:queue:default", 0, -1)),
        timeout=5,
        message="the job to wait in the paused queue",
    )
    cli("queue", "resume", "default")
    wait_until(
        lambda: any(line.startswith("paused") for line in lines(out)), timeout=15, message="the resume"
    )
    assert paused_jid

    # The sets: scheduled (enqueue --in, then delete-all), retry -> dead (kill), dead -> queue.
    cli("enqueue", "tls_jobs.note", json.dumps([str(out), "later"]), "--in", "600")
    assert admin.zcard("cogworker:schedule") == 1
    cli("scheduled", "delete-all", "--yes")
    assert admin.zcard("cogworker:schedule") == 0
    tls_jobs.fail_first.perform_async(str(out), "d")
    wait_until(lambda: admin.zcard("cogworker:retry") == 1, timeout=15, message="the failure to be retried")
    cli("retry", "kill", "--all", "--yes")
    assert admin.zcard("cogworker:dead") == 1
    dead_jid = json.loads(cli("dead", "list", "--json").stdout)
    assert dead_jid
    cli("dead", "retry-all", "--yes")
    wait_until(
        lambda: any(line.startswith("retried-d") for line in lines(out)), timeout=15, message="dead retry"
    )

    # Remote quiet and resume (read on the heartbeat), orphan recovery, doctor --fix.
    cli("quiet", "--all")
    wait_until(lambda: worker.events_named("quieting"), timeout=10, message="the worker to quiet")
    cli("resume", "--all")
    wait_until(lambda: worker.events_named("resuming"), timeout=10, message="the worker to resume")
    cli("recover-orphans")
    cli("doctor", "--fix")

    with TestClient(create_app(settings)) as ui:
        for path in (
            "/",
            "/queues",
            "/queues/default",
            "/busy",
            "/retries",
            "/scheduled",
            "/dead",
            "/periodic",
        ):
            page = ui.get(path)
            assert page.status_code == 200, (path, page.text[-500:])
        assert identity in ui.get("/busy").text
        assert ui.get(f"/jobs/{jid}").status_code == 200

    assert worker.stop() == 0
    failures = worker.events_named("redis_command_failed") + worker.events_named("redis_outage_started")
    assert failures == []
