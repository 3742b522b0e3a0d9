"""Two apps on one Redis, told apart only by COGWORKER_KEY_PREFIX: two real swarms (one prefix with a
hash tag), pushed to by env-only first calls. Each runs only its own jobs, and its CLI, metrics and
Web UI show only its own queues, processes and periodic entries; its key guard and orphan recovery
never touch keys under another prefix (a third, `appc:`, has no swarm: whatever lies there stays)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.daemon_env import clean_env
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.swarm import Swarm, SwarmRunner, swarm_runner
from tests.support.web_server import cogworker_web

pytestmark = pytest.mark.slow

APPS = {"a": "appa:", "b": "{appb}:"}
BYSTANDER = "appc:"  # a prefix nobody runs: nothing under it may change
JOBS = 20


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)


def seed(r: redis.Redis, prefix: str, app: str) -> None:
    """An orphan (a dead process's in-progress list) and a queue key of the wrong type."""
    job = {"class": "demo_jobs.record", "args": [f"orphan-{app}"], "jid": f"orphan{app}", "queue": "default"}
    r.rpush(f"{prefix}inprogress:ghost-{app}", json.dumps(job))
    r.sadd(f"{prefix}inprogress-identities", f"ghost-{app}")
    r.set(f"{prefix}queue:broken", "not a list")
    r.sadd(f"{prefix}queues", "broken")


def cli(url: str, prefix: str, *argv: str) -> Any:
    env = clean_env(COGWORKER_REDIS_URL=url, COGWORKER_KEY_PREFIX=prefix)
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", *argv, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def ran(r: redis.Redis) -> dict[str, int]:
    """tag -> pid of every run of demo_jobs.record."""
    return {tag: int(pid) for tag, pid in (str(e).split() for e in r.lrange("test:ran", 0, -1))}


@pytest.mark.timeout(150)
def test_two_apps_share_one_redis_unseen(private_redis: RedisServer, swarms: SwarmRunner) -> None:
    r = private_redis.client()
    url = private_redis.url
    for app, prefix in [*APPS.items(), ("c", BYSTANDER)]:
        seed(r, prefix, app)
    bystander_before = {k: r.type(k) for k in r.keys(f"{BYSTANDER}*")}
    ports = {app: free_port() for app in APPS}
    running: dict[str, Swarm] = {}
    for app, prefix in APPS.items():
        running[app] = swarms.start(
            COGWORKER_KEY_PREFIX=prefix,
            COGWORKER_REQUIRE=f"demo_jobs,prefix_app_{app}",
            COGWORKER_METRICS_PORT=str(ports[app]),
            COGWORKER_KEY_GUARD_INTERVAL_S="0.5",
            COGWORKER_ORPHAN_CHECK_INTERVAL_S="0.5",
            COGWORKER_POLL_INTERVAL_S="0.2",
        )
    for swarm in running.values():
        swarm.wait_ready(timeout=60)
    for app, prefix in APPS.items():
        code = f"""
            import cogworker, demo_jobs
            for i in range({JOBS // 2}):
                demo_jobs.record.perform_async("{app}-" + str(i))
            cogworker.push_bulk(demo_jobs.record, [("{app}-b" + str(i),) for i in range({JOBS // 2})])
            demo_jobs.record.set(queue="only-{app}").perform_async("{app}-unread")
            print("pushed")
        """
        assert first_call(code, url, COGWORKER_KEY_PREFIX=prefix) == "pushed"

    # Each app's jobs (and its own orphan) run in its own swarm's children, and only there.
    expected = {f"{app}-{i}" for app in APPS for i in range(JOBS // 2)}
    expected |= {f"{app}-b{i}" for app in APPS for i in range(JOBS // 2)} | {f"orphan-{a}" for a in APPS}
    wait_until(lambda: expected <= set(ran(r)), timeout=60, message="every job of both apps to run")
    for app, swarm in running.items():
        pids = {e["child_pid"] for e in swarm.supervisor_events("child_started")}
        mine = {tag: pid for tag, pid in ran(r).items() if tag.startswith((f"{app}-", f"orphan-{app}"))}
        assert set(mine.values()) <= pids, (app, mine, pids)
    assert "orphan-c" not in ran(r)
    # Each app's periodic entry fires (in its own swarm: a tick records which app it is).
    wait_until(
        lambda: {str(t).split()[0] for t in r.lrange("test:ticks", 0, -1)} == {"a", "b"},
        timeout=30,
        message="both apps' periodic entries to fire",
    )

    # Each key guard moved its own broken queue aside, nothing of the other's or the bystander's.
    for prefix in APPS.values():
        wait_until(
            lambda p=prefix: r.type(f"{p}queue:broken") == "none" and r.keys(f"{p}quarantine:queue:broken:*"),
            timeout=30,
            message=f"{prefix}'s key guard to quarantine its broken queue",
        )

    # The CLI, metrics and Web UI of each app see its own queues, processes and periodic entries.
    for app, prefix in APPS.items():
        other = "b" if app == "a" else "a"
        identities = set(running[app].identities().values())
        told = cli(url, prefix, "resume", "--all")["told"]
        assert {p["identity"] for p in told} == identities, told
        assert cli(url, prefix, "recover-orphans") == {"requeued": 0}  # with its keyspace scan
        queues = {q["name"] for q in cli(url, prefix, "queues")}
        assert f"only-{app}" in queues and f"only-{other}" not in queues, queues
        status = cli(url, prefix, "status")
        assert {p["identity"] for p in status["processes"]} == identities
        assert status["processed"] >= JOBS + 1
        entries = [e["name"] for e in cli(url, prefix, "periodic", "list")]
        assert entries == [f"prefix_app_{app}.tick_{app}"], entries
        metrics = get(f"http://127.0.0.1:{ports[app]}/metrics")
        assert f'queue="only-{app}"' in metrics and f'queue="only-{other}"' not in metrics
        others = set(running[other].identities().values())
        with cogworker_web(url, COGWORKER_KEY_PREFIX=prefix) as web:
            pages = {path: get(web.url + path) for path in ("/", "/queues", "/periodic", "/busy")}
        assert f"only-{app}" in pages["/queues"] and f"only-{other}" not in pages["/queues"]
        assert f"tick_{app}" in pages["/periodic"] and f"tick_{other}" not in pages["/periodic"]
        assert all(i in pages["/busy"] for i in identities) and not any(i in pages["/busy"] for i in others)
        assert "<html" in pages["/"]
    assert {k: r.type(k) for k in r.keys(f"{BYSTANDER}*")} == bystander_before
    assert r.lrange(f"{BYSTANDER}inprogress:ghost-c", 0, -1) != []
    assert [k for k in r.keys("*") if not str(k).startswith((*APPS.values(), BYSTANDER, "test:"))] == []
    r.close()
