"""A real swarm (`cogworker-swarm`: supervisor, fork server, two children) against the TLS-only Redis
as the ACL user: sync and async jobs, a child SIGKILLed by its job and its job requeued by the fork
server over TLS, the metrics scrape reading Redis over TLS; and the password found nowhere an operator
or an attacker with `ps` could look: the log, every process title, `cogworker status` and `doctor`
(text and --json), the metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
import redis

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner
from tests.support.tls_redis import APP_PASSWORD, TlsRedis

pytestmark = pytest.mark.slow

# How the password could show, raw or as it sits in the URL.
FORMS = (APP_PASSWORD, quote(APP_PASSWORD, safe=""))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def metric(text: str, sample: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *argv], env=clean, capture_output=True, text=True, timeout=30
    )


def titles(swarm_pid: int) -> list[str]:
    """The command line (`ps -o args`) of the supervisor and every process under it."""
    root = psutil.Process(swarm_pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            found.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, psutil.Error):
            continue
    return found


def test_a_swarm_runs_recovers_and_is_scraped_over_tls_without_showing_the_password(
    tls_redis: TlsRedis, admin: redis.Redis, swarms: SwarmRunner, tmp_path: Path
) -> None:
    port = free_port()
    env = tls_redis.env(
        COGWORKER_REQUIRE="tls_jobs", COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1"
    )
    swarm = swarms.start(**env)
    swarm.wait_ready(timeout=30)
    out = tmp_path / "ran.txt"

    # The test pushes as the ACL user over TLS too, from the settings alone.
    cw_client.configure(load_settings(**{k.removeprefix("COGWORKER_").lower(): v for k, v in env.items()}))
    import tls_jobs

    for i in range(10):
        tls_jobs.note.perform_async(str(out), f"s{i}")
        tls_jobs.anote.perform_async(str(out), f"a{i}")
    tls_jobs.die_first.perform_async(str(out), "k")
    expected = {f"s{i}" for i in range(10)} | {f"async-a{i}" for i in range(10)} | {"recovered-k"}
    # At least once: jobs the killed child had fetched alongside the killer (done or not) run again.
    wait_until(lambda: {line.split()[0] for line in lines(out)} == expected, timeout=30, message="every job")
    died_pid = int(Path(f"{out}.k.died").read_text())
    recovered_pid = int(next(line for line in lines(out) if line.startswith("recovered-k")).split()[1])
    assert died_pid != recovered_pid
    # The fork server requeued the killed child's job at once (over its own TLS connection).
    requeued = swarm.wait_event("child_jobs_requeued")
    assert requeued[0]["moved"] >= 1
    swarm.wait_ready(timeout=30)  # the replacement child

    text = scrape(port)
    assert metric(text, "cogworker_redis_up") == 1.0
    assert metric(text, 'cogworker_queue_size{queue="default"}') == 0.0
    assert metric(text, 'cogworker_set_size{set="retry"}') == 0.0

    status = cli(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert len(json.loads(status.stdout)["processes"]) == 2
    shown = {
        "status": cli(env, "status"),
        "status --json": status,
        "doctor": cli(env, "doctor"),
        "doctor --json": cli(env, "doctor", "--json"),
    }
    outputs = {name: done.stdout + done.stderr for name, done in shown.items()}
    outputs["metrics"] = text
    outputs.update({f"title {i}": title for i, title in enumerate(titles(swarm.pid))})
    assert len([k for k in outputs if k.startswith("title")]) >= 4  # supervisor, fork server, 2 children
    assert swarm.stop() == 0
    outputs["swarm log"] = swarm.log_path.read_text(errors="replace")
    assert all(form in tls_redis.url() or form == APP_PASSWORD for form in FORMS)  # the grep can match
    leaked = [name for name, text in outputs.items() if any(form in text for form in FORMS)]
    assert leaked == []
