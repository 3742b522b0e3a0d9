"""Every component through the sentinels: a user's first push in a fresh interpreter (the URL form and
the settings form), a swarm running jobs, `cogworker status` and `doctor`, the metrics scrape; then a
failover: the scrape and the CLI follow the new master by themselves. And neither password (the
master's, the sentinels') shows in the log, a process title, the CLI's output or the metrics, even
while the master is down and every component is reporting errors."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support import metrics
from tests.support.daemon_env import run_cogworker
from tests.support.first_call import first_call
from tests.support.redis_server import free_port, wait_until
from tests.support.sentinel_redis import MASTER_NAME, MASTER_PASSWORD, SENTINEL_PASSWORD, SentinelRedis
from tests.support.swarm import SwarmRunner, titles
from tests.support.web_server import cogworker_web

pytestmark = pytest.mark.slow

FORMS = (
    MASTER_PASSWORD,
    quote(MASTER_PASSWORD, safe=""),
    SENTINEL_PASSWORD,
    quote(SENTINEL_PASSWORD, safe=""),
)


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return run_cogworker(env, *argv, timeout=60)


def redis_up(port: int) -> float | None:
    return metrics.value(metrics.scrape(port, timeout=10), "cogworker_redis_up")


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as opened:
        yield opened


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_first_calls_through_the_sentinels(deployment: SentinelRedis) -> None:
    code = "from demo_jobs import record; print(record.perform_async('a'))"
    by_url = first_call(code, deployment.url, COGWORKER_REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD)
    by_settings = first_call(
        code,
        f"redis://:{quote(MASTER_PASSWORD, safe='')}@{MASTER_NAME}/0",
        COGWORKER_REDIS_SENTINELS=deployment.sentinels_setting,
        COGWORKER_REDIS_SENTINEL_MASTER=MASTER_NAME,
        COGWORKER_REDIS_SENTINEL_PASSWORD=SENTINEL_PASSWORD,
        COGWORKER_REDIS_MIN_REPLICAS="1",
    )
    master = deployment.node(deployment.master_port_now() or 0)
    queued = {json.loads(raw)["jid"] for raw in master.lrange("cogworker:queue:default", 0, -1)}
    assert queued == {by_url, by_settings}
    # MIN_REPLICAS=1 returned: the replica has the job too.
    on_replica = deployment.node(deployment.replica_port).lrange("cogworker:queue:default", 0, -1)
    assert by_settings in {json.loads(raw)["jid"] for raw in on_replica}


@pytest.mark.timeout(180)
def test_a_swarm_the_cli_the_metrics_and_the_web_ui_follow_a_failover_without_showing_a_password(
    deployment: SentinelRedis, swarms: SwarmRunner, tmp_path: Path, stack: contextlib.ExitStack
) -> None:
    port = free_port()
    env = {
        **deployment.env(),
        "COGWORKER_REQUIRE": "sentinel_jobs",
        "COGWORKER_METRICS_PORT": str(port),
        "COGWORKER_LOG_FORMAT": "json",
    }
    swarm = swarms.start(**env)
    swarm.wait_ready(timeout=60)
    sink = tmp_path / "runs.txt"
    push = "import sys, sentinel_jobs; sentinel_jobs.mark.perform_async(sys.argv[1])"

    def push_one() -> None:
        done = subprocess.run(
            [sys.executable, "-c", push, str(sink)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    web_env = {k: v for k, v in env.items() if k not in ("COGWORKER_REDIS_URL", "COGWORKER_METRICS_PORT")}
    web = stack.enter_context(cogworker_web(deployment.url, **web_env))
    outputs: dict[str, str] = {}
    push_one()
    wait_until(lambda: sink.exists() and len(sink.read_text().splitlines()) == 1, timeout=30, message="a run")
    outputs["web busy"] = page(web.url + "/busy")
    assert outputs["web busy"].count("data-identity=") == 2  # the swarm's two children
    wait_until(lambda: redis_up(port) == 1.0, timeout=30, message="the scrape to read Redis")
    for argv in (["status"], ["status", "--json"], ["doctor"], ["doctor", "--json"]):
        done = cli(env, *argv)
        outputs[" ".join(argv)] = done.stdout + done.stderr
    assert len(json.loads(cli(env, "status", "--json").stdout)["processes"]) == 2

    # No sentinel answering (ports nothing listens on): the CLI fails with a message naming neither
    # password. (During the failover below a fresh CLI may already find the new master.)
    dead = f"redis+sentinel://:{quote(MASTER_PASSWORD, safe='')}@127.0.0.1:{free_port()}/{MASTER_NAME}/0"
    down = cli({**env, "COGWORKER_REDIS_URL": dead}, "status")
    assert down.returncode != 0 and "No master found" in down.stdout + down.stderr
    outputs["status without sentinels"] = down.stdout + down.stderr
    old = deployment.kill_master()
    outputs["metrics while down"] = metrics.scrape_text(port, timeout=10)
    during = cli(env, "status")
    outputs["status while failing over"] = during.stdout + during.stderr
    deployment.wait_promoted(old)
    # Every component found the new master by itself: a job runs, the scrape and the CLI read it.
    push_one()
    wait_until(
        lambda: len(sink.read_text().splitlines()) == 2, timeout=30, message="a run after the failover"
    )
    wait_until(lambda: redis_up(port) == 1.0, timeout=30, message="the scrape to follow the new master")
    # The Web UI found the new master by itself too: its pages answer again (503 while none is known).
    wait_until(lambda: answers_200(web.url + "/"), timeout=30, message="the Web UI after the failover")
    outputs["web after"] = page(web.url + "/") + page(web.url + "/busy")
    after = cli(env, "status", "--json")
    assert after.returncode == 0, after.stderr
    outputs["metrics"] = metrics.scrape_text(port, timeout=10)
    outputs.update({f"title {i}": title for i, title in enumerate(titles(swarm.pid))})
    assert swarm.stop(timeout=60) == 0
    outputs["swarm log"] = swarm.log_path.read_text(errors="replace")
    assert "redis_outage_started" in outputs["swarm log"]  # errors were logged, with their messages
    leaked = [name for name, text in outputs.items() if any(form in text for form in FORMS)]
    assert leaked == []
