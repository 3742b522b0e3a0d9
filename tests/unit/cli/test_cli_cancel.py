"""`cogworker cancel JID [--json]`: each case's line and JSON, its exit code (0 stopped, 1 nothing to
stop, 2 not a job id), a running job cancelled through a real worker, and the verb as the first
command of a fresh interpreter configured only by environment variables."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import cancel_jobs
import demo_jobs
import redis

from cogworker import codec
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.cli_runner import CLI, Workers, cli_fixture, workers_fixture  # noqa: F401
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, wait_until


def test_a_queued_job_is_cancelled_and_said_so(r: redis.Redis, configured: Settings, cli: CLI) -> None:
    jid = demo_jobs.record.perform_async("a")
    done = cli("cancel", jid)
    assert done.code == 0
    assert (
        done.out.strip()
        == f"{jid} (demo_jobs.record, queue default): queued: taken off queue default; it will not run"
    )
    assert r.llen(keys.queue("default")) == 0
    assert r.get(keys.stat("cancelled")) == "1"


def test_json_names_the_case(r: redis.Redis, configured: Settings, cli: CLI) -> None:
    jid = demo_jobs.record.perform_in(600, "later")
    done = cli("cancel", jid, "--json")
    assert done.code == 0
    assert done.json() == {
        "jid": jid,
        "case": "scheduled",
        "detail": "scheduled: taken off the scheduled set; it will not run",
        "job": "demo_jobs.record",
        "queue": "default",
        "processes": [],
        "searched_all": True,
        "stopped": True,
    }


def test_nothing_to_stop_exits_1(r: redis.Redis, configured: Settings, cli: CLI) -> None:
    unknown = cli("cancel", "nosuchjob", "--json")
    assert unknown.code == 1
    assert (unknown.json()["case"], unknown.json()["stopped"]) == ("not_found", False)
    assert "finished or unknown" in unknown.json()["detail"]
    dead = {"class": "demo_jobs.boom", "args": [], "jid": "deadone", "queue": "default"}
    r.zadd(keys.DEAD, {codec.dumps(dead): time.time()})
    done = cli("cancel", "deadone")
    assert done.code == 1
    assert "finished: it is in the dead set" in done.out


def test_not_a_job_id_is_a_usage_error(r: redis.Redis, cli: CLI) -> None:
    done = cli("cancel", "not a jid")
    assert done.code == 2
    assert "is not a job id" in done.err
    assert r.dbsize() == 0


def test_a_running_job_names_its_process(
    r: redis.Redis, configured: Settings, cli: CLI, workers: Workers
) -> None:
    jid = cancel_jobs.cooperative.perform_async("cli")
    proc = workers.start(COGWORKER_REQUIRE="cancel_jobs")
    identity = workers.identity(proc)
    wait_until(
        lambda: any(jid in v for v in r.hvals(keys.work(identity))), timeout=15, message="shown running"
    )
    done = cli("cancel", jid)
    assert done.code == 0
    assert f"{jid} (cancel_jobs.cooperative, queue default): running:" in done.out
    assert f"running in: {identity}" in done.out
    wait_until(lambda: r.get(keys.stat("cancelled")) == "1", timeout=15, message="counted cancelled")
    assert r.lrange("test:ended", 0, -1) == ["cli saw JobCancelled"]


def test_first_command_of_a_fresh_interpreter(r: redis.Redis, redis_server: RedisServer) -> None:
    r.lpush(keys.queue("default"), codec.dumps({"class": "demo_jobs.record", "args": [], "jid": "fresh1"}))
    r.sadd(keys.QUEUES, "default")  # as a push registers it
    clean = clean_env(COGWORKER_REDIS_URL=redis_server.url)
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "cancel", "fresh1", "--json"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["case"] == "queued"
    assert r.llen(keys.queue("default")) == 0
